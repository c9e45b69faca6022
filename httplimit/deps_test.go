package httplimit_test

import (
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestNoHeavyDependencies: importing httplimit (or the root package,
// memstore, redisstore, observe) compiles no gRPC, protobuf, genproto or
// Prometheus, though grpclimit puts gRPC in the module's go.mod; httplimit
// needs nothing outside the standard library and this module, and not
// promobserve; observe needs only the standard library.
func TestNoHeavyDependencies(t *testing.T) {
	// The go command that runs this test is on PATH under `go test`.
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH to run go list")
	}
	const module = "github.com/sluice-go/sluice"
	heavy := []string{"google.golang.org/", "github.com/golang/protobuf", "github.com/prometheus/"}
	for _, pkg := range []string{module + "/httplimit", module, module + "/memstore", module + "/redisstore", module + "/observe"} {
		out, err := exec.Command(goTool, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		deps := strings.Fields(string(out))
		if len(deps) == 0 {
			t.Fatalf("go list -deps %s listed nothing", pkg)
		}
		if pkg == module+"/observe" && (len(deps) != 1 || deps[0] != pkg) {
			t.Errorf("observe imports %v: only the standard library is allowed", deps[:len(deps)-1])
		}
		for _, d := range deps {
			for _, h := range heavy {
				if strings.HasPrefix(d, h) {
					t.Errorf("%s compiles %s", pkg, d)
				}
			}
			if pkg == module+"/httplimit" && d != module && !strings.HasPrefix(d, module+"/") {
				t.Errorf("httplimit imports %s: only the standard library and sluice are allowed", d)
			}
			if d == module+"/promobserve" {
				t.Errorf("%s compiles promobserve", pkg)
			}
		}
		t.Logf("%s: %d non-standard packages: %v", pkg, len(deps), deps)
	}
	// The check can see gRPC where it is: in grpclimit.
	out, err := exec.Command(goTool, "list", "-deps", module+"/grpclimit").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps grpclimit: %v\n%s", err, out)
	}
	if !slices.Contains(strings.Fields(string(out)), "google.golang.org/grpc") {
		t.Error("go list -deps grpclimit does not list google.golang.org/grpc: the check above proves nothing")
	}
}

// TestLibraryModuleRequirements: the library's go.mod requires none of the
// command's dependencies (the RLS protocol, file watching, YAML, the
// browser driver), not even as indirect ones. They belong to cmd/sluice, a
// module of its own, so that the library's go.mod names only what library
// packages import, and its tests build with the versions it names. The
// check runs with GOWORK=off: the repository's go.work joins both modules.
func TestLibraryModuleRequirements(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH to run go mod edit")
	}
	cmd := exec.Command(goTool, "mod", "edit", "-json")
	cmd.Env = append(cmd.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod edit -json: %v", err)
	}
	var mod struct {
		Module  struct{ Path string }
		Require []struct{ Path string }
	}
	if err := json.Unmarshal(out, &mod); err != nil {
		t.Fatalf("go mod edit -json: %v\n%s", err, out)
	}
	if mod.Module.Path != "github.com/sluice-go/sluice" || len(mod.Require) == 0 {
		t.Fatalf("go mod edit -json did not read the library's go.mod:\n%s", out)
	}
	commandOnly := []string{"github.com/envoyproxy/", "github.com/fsnotify/", "go.yaml.in/", "gopkg.in/yaml", "github.com/chromedp/"}
	for _, r := range mod.Require {
		for _, c := range commandOnly {
			if strings.HasPrefix(r.Path, c) {
				t.Errorf("the library's go.mod requires %s: only cmd/sluice needs it", r.Path)
			}
		}
	}
}
