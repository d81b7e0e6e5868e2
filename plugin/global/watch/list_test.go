package watch

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// listServer serves one list response, encoded as the API server would, and records the request.
func listServer(t *testing.T, list runtime.Object, contentType string, status int) (kubernetes.Interface, *http.Request) {
	t.Helper()
	var body bytes.Buffer
	switch contentType {
	case runtime.ContentTypeProtobuf:
		enc := scheme.Codecs.EncoderForVersion(protobuf.NewSerializer(scheme.Scheme, scheme.Scheme), list.GetObjectKind().GroupVersionKind().GroupVersion())
		if err := enc.Encode(list, &body); err != nil {
			t.Fatal(err)
		}
	default:
		info, _ := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
		enc := scheme.Codecs.EncoderForVersion(info.Serializer, list.GetObjectKind().GroupVersionKind().GroupVersion())
		if err := enc.Encode(list, &body); err != nil {
			t.Fatal(err)
		}
	}
	got := &http.Request{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		*got = *r.Clone(context.Background())
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(status)
		_, _ = w.Write(body.Bytes())
	}))
	t.Cleanup(srv.Close)
	c, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, ContentConfig: rest.ContentConfig{ContentType: runtime.ContentTypeProtobuf}})
	if err != nil {
		t.Fatal(err)
	}
	return c, got
}

func testServices() *corev1.ServiceList {
	l := &corev1.ServiceList{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceList"},
		ListMeta: metav1.ListMeta{ResourceVersion: "4711"},
	}
	for _, s := range []*corev1.Service{
		mirrorService("foo-west", nil),
		mirrorService("bar-west", func(s *corev1.Service) { s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "x", Port: 1}) }),
		mirrorService("foo-0-west", func(s *corev1.Service) {
			s.Labels[LabelHeadlessMirror] = "foo-west"
			s.Spec.ClusterIP, s.Spec.ClusterIPs = "10.96.0.10", []string{"10.96.0.10"}
		}),
	} {
		s.ResourceVersion = "12"
		l.Items = append(l.Items, *s)
	}
	return l
}

func testSlices() *discoveryv1.EndpointSliceList {
	l := &discoveryv1.EndpointSliceList{
		TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSliceList"},
		ListMeta: metav1.ListMeta{ResourceVersion: "4712"},
	}
	for _, s := range []*discoveryv1.EndpointSlice{
		mirrorSlice("foo-west-abc", "foo-west", "10.96.0.10"),
		mirrorSlice("bar-west-abc", "bar-west", "10.96.0.11"),
	} {
		s.ResourceVersion = "13"
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.96.0.12"}, Hostname: ptr.To("foo-1"),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}})
		l.Items = append(l.Items, *s)
	}
	return l
}

// converted is what transform makes of a typed list's items.
func converted[T any](t *testing.T, src feed, items []T) []runtime.Object {
	convert := transform(src, newProblemLog("test"))
	var out []runtime.Object
	for i := range items {
		o, err := convert(any(&items[i]))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, o.(runtime.Object))
	}
	return out
}

func TestListConverted(t *testing.T) {
	for _, ct := range []string{runtime.ContentTypeProtobuf, runtime.ContentTypeJSON} {
		t.Run(ct, func(t *testing.T) {
			services := testServices()
			c, req := listServer(t, services, ct, http.StatusOK)
			opts := metav1.ListOptions{LabelSelector: mirrorServiceSelector, ResourceVersion: "0", Limit: 500}
			got, err := listConverted[corev1.Service](context.Background(), c.CoreV1().RESTClient(), "db", "services", opts,
				transform(fromMirror, newProblemLog("Service")),
				func() *corev1.ServiceList { return &corev1.ServiceList{} }, func(l *corev1.ServiceList) []corev1.Service { return l.Items })
			if err != nil {
				t.Fatal(err)
			}
			if req.URL.Path != "/api/v1/namespaces/db/services" || req.Header.Get("Accept") != runtime.ContentTypeProtobuf+", "+runtime.ContentTypeJSON {
				t.Errorf("path %s, Accept %s", req.URL.Path, req.Header.Get("Accept"))
			}
			// One request for the whole list, from the watch cache as the reflector asked.
			if q := req.URL.Query(); q.Get("labelSelector") != mirrorServiceSelector || q.Get("resourceVersion") != "0" || q.Has("limit") {
				t.Errorf("query %s", req.URL.RawQuery)
			}
			l := got.(*convertedList)
			if l.ResourceVersion != "4711" {
				t.Errorf("resourceVersion %q, want 4711", l.ResourceVersion)
			}
			if want := converted(t, fromMirror, testServices().Items); !reflect.DeepEqual(l.Items, want) {
				t.Errorf("items\n%#v\nwant\n%#v", l.Items, want)
			}
			if len(l.Items) != 3 {
				t.Errorf("%d items, want 3", len(l.Items))
			}

			slices := testSlices()
			c, _ = listServer(t, slices, ct, http.StatusOK)
			got, err = listConverted[discoveryv1.EndpointSlice](context.Background(), c.DiscoveryV1().RESTClient(), "db", "endpointslices",
				metav1.ListOptions{}, transform(fromMirror, newProblemLog("EndpointSlice")),
				func() *discoveryv1.EndpointSliceList { return &discoveryv1.EndpointSliceList{} },
				func(l *discoveryv1.EndpointSliceList) []discoveryv1.EndpointSlice { return l.Items })
			if err != nil {
				t.Fatal(err)
			}
			l = got.(*convertedList)
			if want := converted(t, fromMirror, testSlices().Items); l.ResourceVersion != "4712" || !reflect.DeepEqual(l.Items, want) {
				t.Errorf("slices: resourceVersion %q, items\n%#v\nwant\n%#v", l.ResourceVersion, l.Items, want)
			}
		})
	}
}

func TestListConvertedEmpty(t *testing.T) {
	c, _ := listServer(t, &corev1.ServiceList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceList"},
		ListMeta: metav1.ListMeta{ResourceVersion: "9"}}, runtime.ContentTypeProtobuf, http.StatusOK)
	got, err := listConverted[corev1.Service](context.Background(), c.CoreV1().RESTClient(), "", "services", metav1.ListOptions{},
		transform(fromLocal, newProblemLog("Service")),
		func() *corev1.ServiceList { return &corev1.ServiceList{} }, func(l *corev1.ServiceList) []corev1.Service { return l.Items })
	if err != nil {
		t.Fatal(err)
	}
	if l := got.(*convertedList); l.ResourceVersion != "9" || len(l.Items) != 0 {
		t.Errorf("got %#v", l)
	}
}

// The reflector tells an expired resource version (410) from other errors, to relist from the
// newest: the error must come through as the API's.
func TestListConvertedExpired(t *testing.T) {
	status := &metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}, Status: metav1.StatusFailure,
		Code: http.StatusGone, Reason: metav1.StatusReasonExpired, Message: "too old resource version"}
	c, _ := listServer(t, status, runtime.ContentTypeJSON, http.StatusGone)
	_, err := listConverted[corev1.Service](context.Background(), c.CoreV1().RESTClient(), "db", "services", metav1.ListOptions{ResourceVersion: "5"},
		transform(fromLocal, newProblemLog("Service")),
		func() *corev1.ServiceList { return &corev1.ServiceList{} }, func(l *corev1.ServiceList) []corev1.Service { return l.Items })
	if !apierrors.IsResourceExpired(err) {
		t.Errorf("err %v, want an expired resource version", err)
	}
}

// A response cut short is an error, not a shorter list.
func TestListConvertedTruncated(t *testing.T) {
	var body bytes.Buffer
	enc := scheme.Codecs.EncoderForVersion(protobuf.NewSerializer(scheme.Scheme, scheme.Scheme), corev1.SchemeGroupVersion)
	if err := enc.Encode(testServices(), &body); err != nil {
		t.Fatal(err)
	}
	// 4: the prefix alone; 4+2+n: the type (apiVersion v1, kind ServiceList) and nothing after it.
	typeMeta := 2 + len("v1") + 2 + len("ServiceList")
	for _, cut := range []int{body.Len() - 1, body.Len() - 30, body.Len() / 2, 6, 4, 4 + 2 + typeMeta} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", runtime.ContentTypeProtobuf)
			_, _ = w.Write(body.Bytes()[:cut])
		}))
		c, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, ContentConfig: rest.ContentConfig{ContentType: runtime.ContentTypeProtobuf}})
		if err != nil {
			t.Fatal(err)
		}
		got, err := listConverted[corev1.Service](context.Background(), c.CoreV1().RESTClient(), "db", "services", metav1.ListOptions{},
			transform(fromMirror, newProblemLog("Service")),
			func() *corev1.ServiceList { return &corev1.ServiceList{} }, func(l *corev1.ServiceList) []corev1.Service { return l.Items })
		if err == nil {
			t.Errorf("cut at %d of %d: no error, %d items", cut, body.Len(), len(got.(*convertedList).Items))
		}
		srv.Close()
	}
}
