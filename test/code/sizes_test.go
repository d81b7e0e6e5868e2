// Package code tests the repository's Go code as a whole.
package code

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestSizes keeps the code in pieces one can read: no file over 500 lines and no function over
// 60, tests aside, anywhere in the repository (the plugin, the CLI, the image builder, the
// harness and the benchmarks). bin/ holds build output (a previous release's source among it),
// and hidden directories and testdata are not code of ours.
func TestSizes(t *testing.T) {
	fset := token.NewFileSet()
	files := 0
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "../.." && (strings.HasPrefix(name, ".") || name == "bin" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		files++
		rel := strings.TrimPrefix(path, "../../")
		if lines := fset.File(f.Pos()).LineCount(); lines > 500 {
			t.Errorf("%s has %d lines, more than 500", rel, lines)
		}
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Body != nil {
				from, to := fset.Position(fn.Pos()).Line, fset.Position(fn.End()).Line
				if to-from+1 > 60 {
					t.Errorf("%s:%d: %s has %d lines, more than 60", rel, from, fn.Name.Name, to-from+1)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The walk reached the plugin, the CLI's module and the harness, or it checked nothing.
	if files < 100 {
		t.Errorf("only %d Go files found: the walk missed the repository", files)
	}
}
