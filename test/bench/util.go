package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/globaldns/global/test/harness"

	"github.com/miekg/dns"
)

var client = &dns.Client{Timeout: time.Second}

// count asks qname's A records over proto and returns how many came back, and the rcode.
func count(addr, qname, proto string) (int, int, error) {
	m := new(dns.Msg)
	m.SetQuestion(qname, dns.TypeA)
	m.SetEdns0(4096, false)
	c := *client
	c.Net = proto
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		return 0, 0, err
	}
	return len(r.Answer), r.Rcode, nil
}

// freePort returns a loopback port free for both TCP and UDP.
func freePort() (string, error) {
	addr, err := harness.FreeAddr()
	if err != nil {
		return "", err
	}
	_, port, _ := net.SplitHostPort(addr)
	return port, nil
}

// plainHTTP asks for uncompressed responses: the programming step scrapes twice per change, and a
// gzipped scrape takes coredns a gzip writer (~0.4 MB, from a pool every GC empties), garbage
// whose collection lands in the changes it measures.
var plainHTTP = &http.Client{Transport: &http.Transport{DisableCompression: true}}

// metrics scrapes a Prometheus endpoint into sample -> value.
func metrics(addr string) (map[string]float64, error) {
	resp, err := plainHTTP.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if l == "" || l[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		if v, err := strconv.ParseFloat(l[i+1:], 64); err == nil {
			out[l[:i]] = v
		}
	}
	return out, sc.Err()
}

// histogramQuantile estimates quantile q of the observations a Prometheus histogram gained
// between two scrapes, interpolating linearly inside the bucket, as PromQL does.
func histogramQuantile(before, after map[string]float64, name string, q float64) float64 {
	type bucket struct{ le, n float64 }
	var bs []bucket
	for k, v := range after {
		if !strings.HasPrefix(k, name+"_bucket{") {
			continue
		}
		le := k[strings.Index(k, `le="`)+4 : strings.LastIndex(k, `"`)]
		b, err := strconv.ParseFloat(le, 64)
		if err != nil {
			b = math.Inf(1)
		}
		bs = append(bs, bucket{b, v - before[k]})
	}
	if len(bs) == 0 {
		return math.NaN()
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
	total := bs[len(bs)-1].n
	if total == 0 {
		return math.NaN()
	}
	rank, prevLe, prevN := q*total, 0.0, 0.0
	for _, b := range bs {
		if b.n >= rank {
			if math.IsInf(b.le, 1) {
				return prevLe
			}
			return prevLe + (b.le-prevLe)*(rank-prevN)/math.Max(b.n-prevN, 1)
		}
		prevLe, prevN = b.le, b.n
	}
	return prevLe
}

func get(url string) error { return save(url, io.Discard) }

// save writes the body of GET url to w.
func save(url string, w io.Writer) error {
	resp, err := plainHTTP.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(w, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return err
}
