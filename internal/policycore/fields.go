package policycore

import "strconv"

// The draft-11 fields are RFC 9651 Lists of Items, one a policy: a String
// naming it, with Integer parameters, q and w on RateLimit-Policy, r and t
// on RateLimit. Every door writes them with the functions below, so that
// all three send fields any RFC 9651 parser reads.

// MaxInt is the largest RFC 9651 Integer (15 digits). A limit's capacity
// can exceed it (up to algo.MaxScaled, 16 digits): such figures are sent
// as MaxInt.
const MaxInt = 999_999_999_999_999

// AppendInt appends v as a non-negative RFC 9651 Integer, as every
// draft-11 parameter is: a negative v is sent as 0, a larger one than
// MaxInt as MaxInt.
func AppendInt(b []byte, v int64) []byte {
	return strconv.AppendInt(b, min(max(v, 0), MaxInt), 10)
}

// AppendName appends a policy's name as an RFC 9651 String. A String holds
// printable ASCII only, and draft-11 allows no other type, so a name is
// written as RFC 9651 writes a Display String's text: '%' and every byte
// outside printable ASCII (a control character, a byte of a UTF-8
// sequence) become %xx, lower-case hex ("café" is "caf%c3%a9", "50%" is
// "50%25"); '"' and '\' are escaped with '\'. A client that unescapes the
// String and percent-decodes it gets the name's bytes back, and two names
// are never written alike. The names httplimit and grpclimit accept
// (CheckName) hold no byte to percent-encode but '%'.
func AppendName(b []byte, name string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e || c == '%':
			b = append(b, '%', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// AppendPolicy appends one RateLimit-Policy item: "name";q=Q;w=W.
func AppendPolicy(b []byte, name string, q, w int64) []byte {
	b = AppendName(b, name)
	b = append(b, ";q="...)
	b = AppendInt(b, q)
	b = append(b, ";w="...)
	return AppendInt(b, w)
}

// AppendLimit appends one RateLimit item: "name";r=R;t=T, where R is r
// but never more than the policy's q (which the client reads as the
// capacity r is counted against), nor less than 0 (a key in debt, whose
// Remaining is negative, has nothing left).
func AppendLimit(b []byte, name string, r, t, q int64) []byte {
	b = AppendName(b, name)
	b = append(b, ";r="...)
	b = AppendInt(b, max(0, min(r, q)))
	b = append(b, ";t="...)
	return AppendInt(b, t)
}
