package serve

import (
	"fmt"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluice-go/sluice/cmd/sluice/internal/rlsconfig"
)

// ruleMetadata converts the rules' metadata (rlsconfig.Rule.Metadata) to
// google.protobuf.Struct once per configuration.
func ruleMetadata(rules []*rlsconfig.Rule) (map[*rlsconfig.Rule]*structpb.Struct, error) {
	out := map[*rlsconfig.Rule]*structpb.Struct{}
	for _, r := range rules {
		if r.Metadata == nil {
			continue
		}
		st, err := structpb.NewStruct(r.Metadata)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: metadata: %w", r.Domain, r.Path, err)
		}
		out[r] = st
	}
	return out, nil
}

// dynamicMetadata is a response's dynamic_metadata as envoyproxy/ratelimit
// builds it with RESPONSE_DYNAMIC_METADATA: the domain, each descriptor
// (its entries as "key=value", its limit override and hits_addend when
// set), the request's hits_addend when not 0, and under "metadata" the
// metadata of the rules of the descriptors that passed (status OK, not
// unlimited) merged in order: a key already there stays, but two maps under
// one key merge. meta holds the rules' metadata (ruleMetadata), desc the
// call's descriptors.
func dynamicMetadata(meta map[*rlsconfig.Rule]*structpb.Struct, req *pb.RateLimitRequest, desc []descState, statuses []*pb.RateLimitResponse_DescriptorStatus) *structpb.Struct {
	fields := make(map[string]*structpb.Value, 4)
	fields["domain"] = structpb.NewStringValue(req.Domain)
	descs := make([]*structpb.Value, 0, len(req.Descriptors))
	for _, d := range req.Descriptors {
		descs = append(descs, structpb.NewStructValue(descriptorStruct(d)))
	}
	fields["descriptors"] = structpb.NewListValue(&structpb.ListValue{Values: descs})
	if req.HitsAddend != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(req.HitsAddend))
	}
	var merged *structpb.Struct
	for i := range desc {
		ds := &desc[i]
		if ds.kind == kindUnlimited || ds.rule == nil || statuses[i].Code != pb.RateLimitResponse_OK {
			continue
		}
		m := meta[ds.rule]
		if m == nil {
			continue
		}
		if merged == nil {
			merged = &structpb.Struct{Fields: make(map[string]*structpb.Value, len(m.Fields))}
		}
		mergeMetadata(merged, m)
	}
	if merged != nil && len(merged.Fields) > 0 {
		fields["metadata"] = structpb.NewStructValue(merged)
	}
	return &structpb.Struct{Fields: fields}
}

// descriptorStruct is one descriptor in dynamicMetadata.
func descriptorStruct(d *rlv3.RateLimitDescriptor) *structpb.Struct {
	fields := make(map[string]*structpb.Value, 3)
	entries := make([]*structpb.Value, 0, len(d.Entries))
	for _, e := range d.Entries {
		entries = append(entries, structpb.NewStringValue(e.Key+"="+e.Value))
	}
	fields["entries"] = structpb.NewListValue(&structpb.ListValue{Values: entries})
	if d.Limit != nil {
		fields["limit"] = structpb.NewStringValue(d.Limit.String())
	}
	if d.HitsAddend != nil {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(d.HitsAddend.Value))
	}
	return &structpb.Struct{Fields: fields}
}

// mergeMetadata adds src's fields to dst, which the caller owns: a field
// dst has stays, unless both are maps, which merge. What dst takes from src
// is copied, so that merging into it never changes a rule's metadata.
func mergeMetadata(dst, src *structpb.Struct) {
	for k, v := range src.Fields {
		have, ok := dst.Fields[k]
		if !ok {
			dst.Fields[k] = proto.Clone(v).(*structpb.Value)
			continue
		}
		if ds, ss := have.GetStructValue(), v.GetStructValue(); ds != nil && ss != nil {
			mergeMetadata(ds, ss)
		}
	}
}
