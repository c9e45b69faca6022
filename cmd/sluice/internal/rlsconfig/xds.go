package rlsconfig

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluice-go/sluice/cmd/sluice/internal/limits"
)

// XDSTypeURL is the type of the resources ParseXDS reads: go-control-plane's
// RateLimitConfig, which Envoy Gateway serves to envoyproxy/ratelimit.
const XDSTypeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// ParseXDS builds the configuration of an xDS response's resources,
// RateLimitConfig each, every one a file of it named "xds/NAME" (one
// without a name by its place: "xds/#2"). A resource loads as the YAML
// file of the same fields would; the resource has no quota_mode,
// value_to_metric, share_threshold, metadata nor sluice's extensions.
//
// The caps of o.Limits are checked on the resources' wire form before
// anything is decoded from it: their bytes together, then, in one pass
// over each that allocates nothing, how deep its descriptors nest and how
// many rules it holds, all resources together. Only then is each decoded
// and built, one at a time.
func (o Options) ParseXDS(resources []*anypb.Any) (*Config, error) {
	caps := o.caps()
	var size int64
	for _, res := range resources {
		size += int64(len(res.GetValue()))
	}
	if size > caps.ConfigBytes {
		return nil, overBytes(caps, "", "the xDS resources", size)
	}
	names := make([]string, len(resources))
	byName := make(map[string]*anypb.Any, len(resources))
	var rules int64
	for i, res := range resources {
		if res.GetTypeUrl() != XDSTypeURL {
			return nil, fmt.Errorf("xDS resource %d is a %q: want %s", i, res.GetTypeUrl(), XDSTypeURL)
		}
		s := wireScan{caps: caps, rules: rules}
		name, err := s.name(res.GetValue())
		if err != nil {
			return nil, fmt.Errorf("xDS resource %d: %w", i, err)
		}
		file := "xds/" + name
		if name == "" {
			file = "xds/#" + strconv.Itoa(i)
		}
		if _, dup := byName[file]; dup {
			return nil, fmt.Errorf("xDS resources: two are named %q", name)
		}
		s.file = file
		if err := s.config(res.GetValue()); err != nil {
			return nil, err
		}
		names[i], byName[file], rules = file, res, s.rules
	}
	slices.Sort(names)
	b := o.builder(caps, names)
	for _, file := range names {
		var c rlsconf.RateLimitConfig
		if err := proto.Unmarshal(byName[file].GetValue(), &c); err != nil {
			return nil, fmt.Errorf("xDS resource %s: %w", file, err)
		}
		if err := b.file(file, &yamlFile{domain: c.GetDomain(), descs: xdsDescs(c.GetDescriptors())}); err != nil {
			return nil, err
		}
	}
	return b.finish(), nil
}

// wireScan reads a RateLimitConfig's wire form without decoding it,
// checking it against caps: how deep its descriptors nest and how many
// rules it adds to those of the resources before it.
type wireScan struct {
	caps  *limits.Table
	file  string
	rules int64
}

// The fields wireScan reads, by their numbers in rls_conf.proto.
const (
	configName        = 1 // RateLimitConfig.name
	configDescriptors = 3 // RateLimitConfig.descriptors
	descRateLimit     = 3 // RateLimitDescriptor.rate_limit
	descDescriptors   = 4 // RateLimitDescriptor.descriptors
)

// wireFields reads a message's fields whose values are bytes (strings
// and messages), skipping the others, allocating nothing.
type wireFields struct {
	b   []byte
	err error
}

// next returns the next such field; ok is false at the end or at bytes
// that are not a message's (err).
func (w *wireFields) next() (num protowire.Number, v []byte, ok bool) {
	for len(w.b) > 0 {
		num, typ, n := protowire.ConsumeTag(w.b)
		if n < 0 {
			w.err = protowire.ParseError(n)
			return 0, nil, false
		}
		w.b = w.b[n:]
		if typ == protowire.BytesType {
			v, n = protowire.ConsumeBytes(w.b)
		} else {
			n = protowire.ConsumeFieldValue(num, typ, w.b)
		}
		if n < 0 {
			w.err = protowire.ParseError(n)
			return 0, nil, false
		}
		w.b = w.b[n:]
		if typ == protowire.BytesType {
			return num, v, true
		}
	}
	return 0, nil, false
}

// name returns the config's name (the last, as decoding keeps).
func (s *wireScan) name(b []byte) (string, error) {
	name := ""
	w := wireFields{b: b}
	for num, v, ok := w.next(); ok; num, v, ok = w.next() {
		if num == configName {
			name = string(v)
		}
	}
	return name, w.err
}

func (s *wireScan) config(b []byte) error {
	w := wireFields{b: b}
	for num, v, ok := w.next(); ok; num, v, ok = w.next() {
		if num == configDescriptors {
			if err := s.descriptor(v, 1); err != nil {
				return err
			}
		}
	}
	if w.err != nil {
		return fmt.Errorf("xDS resource %s: %w", s.file, w.err)
	}
	return nil
}

// descriptor reads a descriptor depth deep (1 at the top).
func (s *wireScan) descriptor(b []byte, depth int64) error {
	if depth > s.caps.Depth {
		return overDepth(s.caps, s.file, 0, "descriptors")
	}
	rule := false
	w := wireFields{b: b}
	for num, v, ok := w.next(); ok; num, v, ok = w.next() {
		switch num {
		case descRateLimit:
			rule = true
		case descDescriptors:
			if err := s.descriptor(v, depth+1); err != nil {
				return err
			}
		}
	}
	if w.err != nil {
		return fmt.Errorf("xDS resource %s: %w", s.file, w.err)
	}
	if rule {
		if s.rules++; s.rules > s.caps.Rules {
			return overRules(s.caps, s.file, 0, "", false)
		}
	}
	return nil
}

// xdsDescs are the descriptors of a RateLimitConfig as the reader reads
// those of the YAML it stands for. A unit envoy's enum leaves UNKNOWN is
// none, as a YAML without one (a load error unless the limit is
// unlimited); one beyond the enum's names is its number, which does not
// load.
func xdsDescs(ds []*rlsconf.RateLimitDescriptor) []*yamlDesc {
	if len(ds) == 0 {
		return nil
	}
	out := make([]*yamlDesc, len(ds))
	for i, d := range ds {
		out[i] = &yamlDesc{key: d.GetKey(), value: d.GetValue(), descs: xdsDescs(d.GetDescriptors()),
			shadowMode: d.GetShadowMode(), detailedMetric: d.GetDetailedMetric()}
		if rl := d.GetRateLimit(); rl != nil {
			l := &yamlRateLimit{unlimited: rl.GetUnlimited(), name: rl.GetName(), requestsPerUnit: rl.GetRequestsPerUnit()}
			if u := rl.GetUnit(); u != rlsconf.RateLimitUnit_UNKNOWN {
				l.unit = strings.ToLower(u.String())
			}
			for _, r := range rl.GetReplaces() {
				l.replaces = append(l.replaces, yamlReplace{name: r.GetName()})
			}
			out[i].rateLimit = l
		}
	}
	return out
}
