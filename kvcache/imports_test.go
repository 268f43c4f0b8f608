package kvcache

import (
	"os/exec"
	"strings"
	"testing"
)

// TestCoreImports: the core packages import the standard library, each
// other, xxhash and the module's own internal/chunked only; client
// libraries (Redis, msgpack, ZMQ) stay in packages outside it.
func TestCoreImports(t *testing.T) {
	core := []string{"kvcache", "radix", "eviction", "layout", "costmodel"}
	args := []string{"list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}"}
	for _, p := range core {
		args = append(args, "github.com/kvtier/kvtier/"+p)
	}
	out, err := exec.Command("go", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	allowed := map[string]bool{"github.com/cespare/xxhash/v2": true, "github.com/kvtier/kvtier/internal/chunked": true}
	for _, p := range core {
		allowed["github.com/kvtier/kvtier/"+p] = true
	}
	for _, dep := range strings.Fields(string(out)) {
		if !allowed[dep] {
			t.Errorf("the core imports %s", dep)
		}
	}
}
