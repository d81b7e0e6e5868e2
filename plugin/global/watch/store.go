package watch

import (
	"hash/maphash"
	"net/netip"
	"slices"
	"sync"

	"github.com/globaldns/global/plugin/global/index"
)

// The reflectors write into one objectStore, by namespace, through a reflectorStore each
// (reflector.go), which converts each object and hands it to its kind. What each kind keeps is
// here, with the store that holds it; how it is put, removed and read by the index is in the file
// named for the kind, between the two: services.go (local members and headless mirrors),
// endpointslices.go, podmirrors.go (Linkerd's per-pod mirrors and their slices).

// objectStore holds every reflector's objects, by namespace, indexed as the index reads them.
// One lock: writes are short (one object), reads copy what they return.
type objectStore struct {
	mu          sync.RWMutex
	byNamespace map[string]*namespaceObjects
	sink        Sink
	stamps      uint64 // per-pod mirror changes so far: each stamps its podMirrorList (under mu)
}

// namespaceObjects is one namespace's objects.
type namespaceObjects struct {
	local           map[string]*service       // local member Services, by name
	mirrors         map[string]*service       // headless mirrors, by name
	mirrorsOf       map[string][]*service     // headless mirrors, by global service name
	podMirrors      map[uint64]*podMirror     // per-pod mirrors, by podID of their name
	podMirrorLists  map[string]*podMirrorList // per-pod mirrors, by headless mirror name
	localSlices     feedSlices                // the local Services'
	mirrorSlices    feedSlices                // the headless (and ClusterIP) mirrors'
	podMirrorSlices map[uint64]podAndReady    // per-pod mirrors' slices, by nameID of their name
}

func newObjectStore() *objectStore { return &objectStore{byNamespace: map[string]*namespaceObjects{}} }

func (s *objectStore) setSink(sink Sink) {
	s.mu.Lock()
	s.sink = sink
	s.mu.Unlock()
}

// objectsIn returns namespace ns's objects, made if missing.
func (s *objectStore) objectsIn(ns string) *namespaceObjects {
	sp := s.byNamespace[ns]
	if sp == nil {
		sp = &namespaceObjects{
			local: map[string]*service{}, mirrors: map[string]*service{}, mirrorsOf: map[string][]*service{},
			podMirrors: map[uint64]*podMirror{}, podMirrorLists: map[string]*podMirrorList{},
			localSlices:     newFeedSlices(),
			mirrorSlices:    newFeedSlices(),
			podMirrorSlices: map[uint64]podAndReady{},
		}
		s.byNamespace[ns] = sp
	}
	return sp
}

// affected collects the global services one write affects, to notify once the lock is released.
type affected map[index.Key]struct{}

func (c affected) add(k index.Key, ok bool) {
	if ok {
		c[k] = struct{}{}
	}
}

// objectKey identifies an object of a reflector in a namespace: by name (Services), or by nameID
// of the name: per-pod mirrors and every slice, whose maps are the biggest (a string key in a map
// takes 16 bytes, and a name of its own for per-pod mirrors).
type objectKey struct {
	name string
	id   uint64
}

// nameSeed keys nameID; random, so no one can choose names that collide. Two of 100,000 names
// collide with a probability of about 3e-10.
var nameSeed = maphash.MakeSeed()

func nameID(name string) uint64 { return maphash.String(nameSeed, name) }

// podID is the nameID of a per-pod mirror, without its low bit, which podAndReady uses.
func podID(name string) uint64 { return nameID(name) &^ 1 }

// objectRef names one object of a reflector: in a namespace, by its key.
type objectRef struct {
	namespace string
	key       objectKey
}

// drop removes o from list k of m, deleting the key when the list empties.
func drop[T comparable](m map[string][]T, k string, o T) {
	list := slices.DeleteFunc(m[k], func(e T) bool { return e == o })
	if len(list) == 0 {
		delete(m, k)
		return
	}
	m[k] = list
}

// Sink receives what the watcher sees: Changed for every global service an event may affect, and
// Start once the store holds the initial state. *index.Index is a Sink.
type Sink interface {
	Changed(index.Key)
	Start()
}

// feedSlices is the slices of one feed, by nameID of their name and by Service: nearly every
// Service has one slice, so the first is kept apart from the rest (a list per Service would be
// one more allocation, and a bigger map entry, per Service).
type feedSlices struct {
	byName map[uint64]*slice
	first  map[string]*slice     // by Service
	more   map[string][]sliceRef // by Service, when it has more than one
}

func newFeedSlices() feedSlices {
	return feedSlices{byName: map[uint64]*slice{}, first: map[string]*slice{}, more: map[string][]sliceRef{}}
}

// podMirrorList is the per-pod mirrors of one headless mirror, a list linked through
// podMirror.next (a slice of pointers would be one more allocation per headless mirror).
type podMirrorList struct {
	headless string // the headless mirror's name
	first    *podMirror
	gen      uint64 // the stamp of the last change to its list or its per-pod mirrors' readiness
}

// podAndReady is what is kept of a per-pod mirror's slice: whose (podID of the per-pod mirror)
// and whether it counts as ready (the low bit), in one word: there is one per mirror record.
type podAndReady uint64

// service is a Service as the index sees it.
type service struct {
	meta
	member *index.Member // nil: not a member of any global service
	global string        // the global service's name, in the same namespace
}

// podMirror is a per-pod mirror: its Service (list nil until seen) and how many of its
// EndpointSlices there are, and have a ready endpoint. One entry for both kinds, 48 bytes, with
// neither name nor version: there is one per mirror record, and what a relist compares is its
// content.
type podMirror struct {
	list          *podMirrorList // its headless mirror's
	next          *podMirror     // in list
	ip            netip.Addr
	slices, ready int32
}

// slice is an EndpointSlice as the index sees it.
type slice struct {
	meta
	service string       // kubernetes.io/service-name
	slice   *index.Slice // nil: skipped
}

// sliceRef is a slice in a Service's list, with what the index reads of it at hand: a Service of
// many slices is read on each change of one, and its other slices are long out of the cache.
type sliceRef struct {
	obj   *slice
	slice *index.Slice
}
