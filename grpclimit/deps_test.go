package grpclimit_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLightPackagesCompileNoGRPC: with gRPC in the module's go.mod for this
// package, importing the root package, memstore, redisstore, httplimit or
// observe still compiles no gRPC, protobuf or genproto; this package does.
func TestLightPackagesCompileNoGRPC(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH to run go list")
	}
	const module = "github.com/sluice-go/sluice"
	deps := func(pkg string) []string {
		out, err := exec.Command(goTool, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		return strings.Fields(string(out))
	}
	heavy := []string{"google.golang.org/", "github.com/golang/protobuf"}
	for _, pkg := range []string{module, module + "/memstore", module + "/redisstore", module + "/httplimit", module + "/observe"} {
		for _, d := range deps(pkg) {
			for _, h := range heavy {
				if strings.HasPrefix(d, h) {
					t.Errorf("%s compiles %s", pkg, d)
				}
			}
		}
	}
	found := false
	for _, d := range deps(module + "/grpclimit") {
		found = found || d == "google.golang.org/grpc"
	}
	if !found {
		t.Error("go list -deps grpclimit does not list google.golang.org/grpc: the check above proves nothing")
	}
}
