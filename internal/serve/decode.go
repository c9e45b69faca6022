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
	nd, ne, err := countRequest(b)
	if err != nil {
		return err
	}
	all := string(b)
	descs := make([]rlv3.RateLimitDescriptor, nd)
	ents := make([]rlv3.RateLimitDescriptor_Entry, ne)
	eptrs := make([]*rlv3.RateLimitDescriptor_Entry, ne)
	for i := range ents {
		eptrs[i] = &ents[i]
	}
	req.Descriptors = make([]*rlv3.RateLimitDescriptor, nd)
	d := &decoder{all: all}
	for off := 0; off < len(b); {
		num, typ, n := consumeTag(b[off:])
		off += n
		switch {
		case num == 1 && typ == protowire.BytesType:
			s, n := d.str(b, off)
			if n < 0 {
				return errBadRequest
			}
			req.Domain, off = s, off+n
		case num == 2 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b[off:])
			desc := &descs[0]
			descs = descs[1:]
			req.Descriptors[len(req.Descriptors)-len(descs)-1] = desc
			k := countEntries(v)
			desc.Entries, eptrs = eptrs[:k:k], eptrs[k:]
			if err := d.descriptor(b, off+n-len(v), v, desc); err != nil {
				return err
			}
			off += n
		case num == 3 && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b[off:])
			req.HitsAddend, off = uint32(v), off+n
		default:
			n := protowire.ConsumeFieldValue(num, typ, b[off:])
			if n < 0 {
				return errBadRequest
			}
			off += n
		}
	}
	if len(req.Descriptors) == 0 {
		req.Descriptors = nil
	}
	return nil
}

// decoder slices strings out of the request's one string.
type decoder struct{ all string }

// str reads a length-delimited string field's value at b[off:] (b the
// whole request) and returns it and the bytes consumed, -1 if malformed.
func (d *decoder) str(b []byte, off int) (string, int) {
	v, n := protowire.ConsumeBytes(b[off:])
	if n < 0 || !utf8.Valid(v) {
		return "", -1
	}
	start := off + n - len(v)
	return d.all[start : start+len(v)], n
}

// descriptor decodes one descriptor, v at b[base:], into desc, whose Entries
// are allocated already and filled in order.
func (d *decoder) descriptor(b []byte, base int, v []byte, desc *rlv3.RateLimitDescriptor) error {
	ei := 0
	for off := 0; off < len(v); {
		num, typ, n := consumeTag(v[off:])
		off += n
		switch {
		case num == 1 && typ == protowire.BytesType:
			ev, n := protowire.ConsumeBytes(v[off:])
			e := desc.Entries[ei]
			ei++
			for eo := 0; eo < len(ev); {
				enum, etyp, m := consumeTag(ev[eo:])
				eo += m
				switch {
				case (enum == 1 || enum == 2) && etyp == protowire.BytesType:
					s, m := d.str(b, base+off+n-len(ev)+eo)
					if m < 0 {
						return errBadRequest
					}
					if enum == 1 {
						e.Key = s
					} else {
						e.Value = s
					}
					eo += m
				default:
					m := protowire.ConsumeFieldValue(enum, etyp, ev[eo:])
					if m < 0 {
						return errBadRequest
					}
					eo += m
				}
			}
			off += n
		case num == 2 && typ == protowire.BytesType:
			lv, n := protowire.ConsumeBytes(v[off:])
			if desc.Limit == nil {
				desc.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{}
			}
			if err := varints(lv, func(f protowire.Number, x uint64) {
				switch f {
				case 1:
					desc.Limit.RequestsPerUnit = uint32(x)
				case 2:
					desc.Limit.Unit = typev3.RateLimitUnit(int32(x))
				}
			}); err != nil {
				return err
			}
			off += n
		case num == 3 && typ == protowire.BytesType:
			hv, n := protowire.ConsumeBytes(v[off:])
			if desc.HitsAddend == nil {
				desc.HitsAddend = &wrapperspb.UInt64Value{}
			}
			if err := varints(hv, func(f protowire.Number, x uint64) {
				if f == 1 {
					desc.HitsAddend.Value = x
				}
			}); err != nil {
				return err
			}
			off += n
		case num == 4 && typ == protowire.VarintType:
			x, n := protowire.ConsumeVarint(v[off:])
			desc.IsNegativeHits, off = x != 0, off+n
		default:
			n := protowire.ConsumeFieldValue(num, typ, v[off:])
			if n < 0 {
				return errBadRequest
			}
			off += n
		}
	}
	return nil
}

// varints calls f for each varint field of a small message and skips the
// others.
func varints(b []byte, f func(protowire.Number, uint64)) error {
	for off := 0; off < len(b); {
		num, typ, n := consumeTag(b[off:])
		if n < 0 {
			return errBadRequest
		}
		off += n
		if typ == protowire.VarintType {
			x, n := protowire.ConsumeVarint(b[off:])
			if n < 0 {
				return errBadRequest
			}
			f(num, x)
			off += n
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b[off:])
		if n < 0 {
			return errBadRequest
		}
		off += n
	}
	return nil
}

// countRequest checks the request's framing and counts its descriptors and
// entries.
func countRequest(b []byte) (descs, entries int, err error) {
	for off := 0; off < len(b); {
		num, typ, n := consumeTag(b[off:])
		if n < 0 {
			return 0, 0, errBadRequest
		}
		off += n
		m := protowire.ConsumeFieldValue(num, typ, b[off:])
		if m < 0 {
			return 0, 0, errBadRequest
		}
		if num == 2 && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(b[off:])
			k, err := checkDescriptor(v)
			if err != nil {
				return 0, 0, err
			}
			descs++
			entries += k
		}
		off += m
	}
	return descs, entries, nil
}

// checkDescriptor checks a descriptor's framing (and its entries') and
// counts its entries.
func checkDescriptor(v []byte) (int, error) {
	k := 0
	for off := 0; off < len(v); {
		num, typ, n := consumeTag(v[off:])
		if n < 0 {
			return 0, errBadRequest
		}
		off += n
		m := protowire.ConsumeFieldValue(num, typ, v[off:])
		if m < 0 {
			return 0, errBadRequest
		}
		if num == 1 && typ == protowire.BytesType {
			ev, _ := protowire.ConsumeBytes(v[off:])
			for eo := 0; eo < len(ev); {
				enum, etyp, n := consumeTag(ev[eo:])
				if n < 0 {
					return 0, errBadRequest
				}
				eo += n
				mm := protowire.ConsumeFieldValue(enum, etyp, ev[eo:])
				if mm < 0 {
					return 0, errBadRequest
				}
				eo += mm
			}
			k++
		}
		off += m
	}
	return k, nil
}

// countEntries counts a (checked) descriptor's entries.
func countEntries(v []byte) int {
	k, _ := checkDescriptor(v)
	return k
}

// consumeTag is protowire.ConsumeTag that also refuses field numbers above
// the largest valid one, as proto.Unmarshal does.
func consumeTag(b []byte) (protowire.Number, protowire.Type, int) {
	num, typ, n := protowire.ConsumeTag(b)
	if n >= 0 && num > protowire.MaxValidNumber {
		return 0, 0, -1
	}
	return num, typ, n
}
