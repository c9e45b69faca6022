package serve

import (
	"errors"
	"unicode/utf8"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

var errBadRequest = errors.New("serve: malformed RateLimitRequest")

// decodeRequest decodes a RateLimitRequest from its protobuf encoding into
// req, as proto.Unmarshal does with DiscardUnknown, in a few allocations: one
// string holds every string of the request, and the descriptors and entries
// are allocated in one slice each. Unknown fields, and known fields of
// another wire type, are skipped; a string that is not UTF-8 is an error.
func decodeRequest(b []byte, req *pb.RateLimitRequest) error {
	nd, ne := 0, 0
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num != 2 || typ != protowire.BytesType {
			return nil
		}
		nd++
		return eachField(v, func(num protowire.Number, typ protowire.Type, ev []byte) error {
			if num != 1 || typ != protowire.BytesType {
				return nil
			}
			ne++
			return eachField(ev, nil)
		})
	})
	if err != nil {
		return err
	}
	d := &decoder{all: string(b), capB: cap(b)}
	var descs []rlv3.RateLimitDescriptor
	var ents []rlv3.RateLimitDescriptor_Entry
	var eptrs []*rlv3.RateLimitDescriptor_Entry
	if nd == 1 && ne <= smallEntries {
		sm := new(smallRequest)
		descs, ents, eptrs = sm.desc[:], sm.ents[:ne], sm.eptrs[:ne]
		req.Descriptors = sm.dptr[:0]
	} else {
		descs = make([]rlv3.RateLimitDescriptor, nd)
		ents = make([]rlv3.RateLimitDescriptor_Entry, ne)
		eptrs = make([]*rlv3.RateLimitDescriptor_Entry, ne)
		if nd > 0 {
			req.Descriptors = make([]*rlv3.RateLimitDescriptor, 0, nd)
		}
	}
	for i := range ents {
		eptrs[i] = &ents[i]
	}
	return eachField(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			return d.str(v, &req.Domain)
		case num == 2 && typ == protowire.BytesType:
			desc := &descs[len(req.Descriptors)]
			req.Descriptors = append(req.Descriptors, desc)
			return d.descriptor(v, desc, &eptrs)
		case num == 3 && typ == protowire.VarintType:
			x, _ := protowire.ConsumeVarint(v)
			req.HitsAddend = uint32(x)
		}
		return nil
	})
}

// smallEntries is the most entries a request of one descriptor has for its
// parts to be allocated together (smallRequest).
const smallEntries = 2

// smallRequest holds the parts of a request of one descriptor and at most
// smallEntries entries, the common call, so that they are one allocation.
type smallRequest struct {
	desc  [1]rlv3.RateLimitDescriptor
	dptr  [1]*rlv3.RateLimitDescriptor
	ents  [smallEntries]rlv3.RateLimitDescriptor_Entry
	eptrs [smallEntries]*rlv3.RateLimitDescriptor_Entry
}

// eachField calls fn (when not nil) for each field of the message b, with
// the field's value: a length-delimited field's content, else its encoding.
// A malformed field is an error, as proto.Unmarshal has it.
func eachField(b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte) error) error {
	for off := 0; off < len(b); {
		num, typ, n := protowire.ConsumeTag(b[off:])
		if n < 0 || num > protowire.MaxValidNumber {
			return errBadRequest
		}
		off += n
		m := protowire.ConsumeFieldValue(num, typ, b[off:])
		if m < 0 {
			return errBadRequest
		}
		v := b[off : off+m]
		if typ == protowire.BytesType {
			v, _ = protowire.ConsumeBytes(v)
		}
		if fn != nil {
			if err := fn(num, typ, v); err != nil {
				return err
			}
		}
		off += m
	}
	return nil
}

// decoder slices strings out of the request's one string.
type decoder struct {
	all  string // the request, copied once
	capB int    // cap of the request's bytes: a field v is at cap(b)-cap(v)
}

// str sets *dst to the string field v, a slice of the request's bytes.
func (d *decoder) str(v []byte, dst *string) error {
	if !utf8.Valid(v) {
		return errBadRequest
	}
	i := d.capB - cap(v)
	*dst = d.all[i : i+len(v)]
	return nil
}

// descriptor decodes one descriptor v into desc, taking its entries from the
// front of *eptrs.
func (d *decoder) descriptor(v []byte, desc *rlv3.RateLimitDescriptor, eptrs *[]*rlv3.RateLimitDescriptor_Entry) error {
	base := *eptrs
	err := eachField(v, func(num protowire.Number, typ protowire.Type, fv []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			e := (*eptrs)[0]
			*eptrs = (*eptrs)[1:]
			return eachField(fv, func(num protowire.Number, typ protowire.Type, sv []byte) error {
				switch {
				case num == 1 && typ == protowire.BytesType:
					return d.str(sv, &e.Key)
				case num == 2 && typ == protowire.BytesType:
					return d.str(sv, &e.Value)
				}
				return nil
			})
		case num == 2 && typ == protowire.BytesType:
			if desc.Limit == nil {
				desc.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{}
			}
			return eachField(fv, func(num protowire.Number, typ protowire.Type, x []byte) error {
				u, _ := protowire.ConsumeVarint(x)
				switch {
				case num == 1 && typ == protowire.VarintType:
					desc.Limit.RequestsPerUnit = uint32(u)
				case num == 2 && typ == protowire.VarintType:
					desc.Limit.Unit = typev3.RateLimitUnit(int32(u))
				}
				return nil
			})
		case num == 3 && typ == protowire.BytesType:
			if desc.HitsAddend == nil {
				desc.HitsAddend = &wrapperspb.UInt64Value{}
			}
			return eachField(fv, func(num protowire.Number, typ protowire.Type, x []byte) error {
				if num == 1 && typ == protowire.VarintType {
					desc.HitsAddend.Value, _ = protowire.ConsumeVarint(x)
				}
				return nil
			})
		case num == 4 && typ == protowire.VarintType:
			x, _ := protowire.ConsumeVarint(fv)
			desc.IsNegativeHits = x != 0
		}
		return nil
	})
	if k := len(base) - len(*eptrs); k > 0 {
		desc.Entries = base[:k:k]
	}
	return err
}
