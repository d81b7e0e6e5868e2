package code

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// layered are packages whose files are layers, from the top down: a file uses names of its own
// layer and of those below it only, so that a reader follows one way down.
var layered = map[string][][]string{
	// The plugin: its setup, the Corefile's options, ServeDNS, the plugin's fields and lifecycle.
	"plugin/global": {
		{"setup.go"}, {"config.go"}, {"handler.go"}, {"global.go"},
	},
	// The answer path, followed one way down as in CoreDNS's k8s_external: a name dispatched to
	// its reply or its explanation; the IN reply, of address or SRV records and what they share;
	// what the name selects (its service, view and policy) into a selection; who asks; the name.
	"plugin/global/answer": {
		{"respond.go"}, {"explain.go"}, {"reply.go"}, {"addresses.go", "srv.go"}, {"maker.go"},
		{"view.go"}, {"selection.go"}, {"asker.go"}, {"names.go"},
	},
	// The index: what changed (for the writer); the index and its snapshots; a service rebuilt,
	// merged from its last state or built whole, with its counts, mesh annotations and warnings;
	// the views queries read (nearest first, the cluster's, the policy's cut, a client's tiers);
	// the service; the views it remembers; the topology and its one tier rule; records, their
	// order, and the types.
	"plugin/global/index": {
		{"changes.go"}, {"index.go"}, {"rebuild.go"}, {"merge.go"}, {"build.go"}, {"health.go"}, {"mesh.go"},
		{"warnings.go"}, {"nearest.go"}, {"views.go"}, {"policy.go"}, {"client.go"}, {"service.go"}, {"memo.go"},
		{"topology.go"}, {"records.go"}, {"compare.go"}, {"types.go"},
	},
	// The watch: where clients run (Nodes, Pods, forwarders) and the topology's sources; the
	// watcher of Services and EndpointSlices, its reflectors' stores and the kinds they convert to
	// (per-pod mirrors, slices, Services), the store that holds what each kind keeps, Linkerd's
	// labels, the objects' shared parts, listing, interning.
	"plugin/global/watch": {
		{"clients.go"}, {"forwarders.go"}, {"pods.go"}, {"nodes.go"}, {"topology.go"}, {"watcher.go"},
		{"reflector.go"}, {"podmirrors.go"}, {"endpointslices.go"}, {"services.go"}, {"store.go"},
		{"linkerd.go"}, {"object.go"}, {"list.go"}, {"intern.go"},
	},
	// The writer: the lifecycle (the Lease, the controller's terms and queue), the reconciler and
	// what it reads (plans of slices, their layout, the comparison with what is written), then
	// the caches and the record of its own writes, the desired objects' labels, its configuration.
	"plugin/global/writer": {
		{"leftovers.go"}, {"election.go"}, {"controller.go"}, {"sweep.go"}, {"fairqueue.go"}, {"discovery.go"},
		{"reconciler.go"}, {"mcs.go"}, {"sliceset.go"}, {"plan.go"}, {"layout.go"}, {"equal.go"},
		{"mesh.go"}, {"tracker.go"}, {"store.go"}, {"conflicts.go"}, {"desired.go"}, {"config.go"}, {"owner.go"},
	},
	// The CLI (linkerd-global): main and the root command, the commands, the checks in the order
	// check runs their categories (and what status reads of them), rendering, running checks,
	// what they share (the healthChecker, the installation found, reaching pods), the Corefile
	// read, the API client, and what the extension is (its names, labels, flags).
	"deploy/linkerd-global": {
		{"main.go"}, {"root.go"}, {"version.go"}, {"install.go"}, {"explain.go"}, {"check.go"},
		{"checks_install.go"}, {"checks_dns.go"}, {"nodelocal.go"}, {"checks_rbac.go"}, {"status.go"},
		{"checks_topology.go"}, {"render.go"}, {"checks_replicas.go"}, {"checkrun.go"}, {"healthchecker.go"},
		{"installation.go"}, {"reach.go"}, {"corefile.go"}, {"kube.go"}, {"extension.go"},
	},
	// The random history: a step, the faults and the changes it plays, the checks of the
	// replicas' answers and of the written objects, the oracle they compare with, and the world.
	"test/history": {
		{"history.go"}, {"faults.go"}, {"changes.go"}, {"answers.go", "written.go"}, {"oracle.go"}, {"world.go"},
	},
}

// TestLayers checks that no file of a layered package uses a name defined in a file of a layer
// above its own: package-level names, and methods and fields called or read by an unexported name
// (exported selectors may be any package's: they are not checked).
func TestLayers(t *testing.T) {
	for dir, layers := range layered {
		t.Run(dir, func(t *testing.T) { checkLayers(t, filepath.Join("../..", dir), layers) })
	}
}

func checkLayers(t *testing.T, dir string, layers [][]string) {
	layer := map[string]int{}
	for i, files := range layers {
		for _, f := range files {
			layer[f] = i
		}
	}
	fset := token.NewFileSet()
	files := map[string]*ast.File{}
	matches, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	for _, path := range matches {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		if _, ok := layer[filepath.Base(path)]; !ok {
			t.Errorf("%s is in no layer: add it to layers", path)
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files[path] = f
	}
	// Where each package-level name, and each unexported method or field name, is defined.
	defined := map[string]string{}
	members := map[string]map[string]bool{}
	for path, f := range files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					defined[d.Name.Name] = path
				} else if !d.Name.IsExported() {
					addMember(members, d.Name.Name, path)
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						defined[s.Name.Name] = path
						if st, ok := s.Type.(*ast.StructType); ok {
							for _, field := range st.Fields.List {
								for _, n := range field.Names {
									addMember(members, n.Name, path)
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							defined[n.Name] = path
						}
					}
				}
			}
		}
	}
	for path, f := range files {
		var visit func(n ast.Node) bool
		inspect := func(nodes ...ast.Node) {
			for _, n := range nodes {
				if n != nil && !reflect.ValueOf(n).IsNil() {
					ast.Inspect(n, visit)
				}
			}
		}
		visit = func(n ast.Node) bool {
			var used, from string
			switch n := n.(type) {
			case *ast.FuncDecl: // not its own name
				inspect(n.Recv, n.Type, n.Body)
				return false
			case *ast.Field: // not the names of fields and parameters
				inspect(n.Type)
				return false
			case *ast.KeyValueExpr: // a composite literal's key may be a field's name
				if _, ok := n.Key.(*ast.Ident); ok {
					inspect(n.Value)
					return false
				}
			case *ast.SelectorExpr:
				if ms := members[n.Sel.Name]; len(ms) == 1 && !n.Sel.IsExported() {
					for from = range ms {
					}
					used = n.Sel.Name
				}
				inspect(n.X)
			case *ast.Ident:
				if n.Name != "_" { // the blank identifier is every file's
					used, from = n.Name, defined[n.Name]
				}
			}
			if from != "" && layer[filepath.Base(from)] < layer[filepath.Base(path)] {
				t.Errorf("%s: %s uses %s, defined in %s above it", fset.Position(n.Pos()), path, used, from)
			}
			_, selector := n.(*ast.SelectorExpr)
			return !selector
		}
		for _, d := range f.Decls { // not the package clause: package main is no use of func main
			inspect(d)
		}
	}
}

func addMember(members map[string]map[string]bool, name, path string) {
	if members[name] == nil {
		members[name] = map[string]bool{}
	}
	members[name][path] = true
}
