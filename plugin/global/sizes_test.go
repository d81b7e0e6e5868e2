package global

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestSizes keeps the plugin's code in pieces one can read: no file over 500 lines and no function
// over 60, tests aside, in this package or below it.
func TestSizes(t *testing.T) {
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		if lines := fset.File(f.Pos()).LineCount(); lines > 500 {
			t.Errorf("%s has %d lines, more than 500", path, lines)
		}
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Body != nil {
				from, to := fset.Position(fn.Pos()).Line, fset.Position(fn.End()).Line
				if to-from+1 > 60 {
					t.Errorf("%s:%d: %s has %d lines, more than 60", path, from, fn.Name.Name, to-from+1)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
