// Package envoytest reads Envoy's own configuration (a bootstrap in YAML,
// as the examples and deploy/ ship it) into go-control-plane's types and
// checks it against Envoy's validation rules, for the tests that keep
// those files valid. Only tests import it.
package envoytest

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	// The typed_config types the checked files use, so that their Anys
	// resolve.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/lua/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	yaml "go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// Bootstrap reads the Envoy bootstrap in YAML at path, every field known
// to Envoy's protos, and validates it (ValidateAll).
func Bootstrap(path string) (*bootstrapv3.Bootstrap, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var raw any
	if err := yaml.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	js, err := json.Marshal(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var boot bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &boot); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := ValidateAll(&boot); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &boot, nil
}

// ValidateAll runs m's protoc-gen-validate rules and those of every
// message packed in an Any inside it (typed_config), which its own rules
// do not reach.
func ValidateAll(m proto.Message) error {
	if v, ok := m.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			return err
		}
	}
	var err error
	var walk func(protoreflect.Message)
	walk = func(pm protoreflect.Message) {
		pm.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			if fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind {
				return true
			}
			each := func(x protoreflect.Value) {
				if a, ok := x.Message().Interface().(*anypb.Any); ok {
					inner, e := a.UnmarshalNew()
					if e == nil {
						e = ValidateAll(inner)
					}
					err = errors.Join(err, e)
					return
				}
				walk(x.Message())
			}
			switch {
			case fd.IsList():
				for i := range v.List().Len() {
					each(v.List().Get(i))
				}
			case fd.IsMap():
				if fd.MapValue().Kind() == protoreflect.MessageKind {
					v.Map().Range(func(_ protoreflect.MapKey, x protoreflect.Value) bool { each(x); return true })
				}
			default:
				each(v)
			}
			return true
		})
	}
	walk(m.ProtoReflect())
	return err
}
