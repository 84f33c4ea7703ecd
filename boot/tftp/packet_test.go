package tftp

import (
	"bytes"
	"reflect"
	"testing"
	"time"
)

func TestParseRequestAndNegotiate(t *testing.T) {
	for name, tc := range map[string]struct {
		in      []byte
		err     bool
		maxBlk  int
		want    params
		wantReq request
	}{
		"no options": {
			in:      rq(opRRQ, "ipxe.efi", "octet"),
			maxBlk:  1468,
			want:    params{blksize: 512, window: 1},
			wantReq: request{op: opRRQ, filename: "ipxe.efi", mode: "octet"},
		},
		"blksize capped by the MTU, options in any case": {
			in:      rq(opRRQ, "ipxe.efi", "Octet", "BLKSIZE", "9000", "tsize", "0"),
			maxBlk:  1468,
			want:    params{blksize: 1468, window: 1, oack: []option{{"blksize", "1468"}, {"tsize", "1000"}}},
			wantReq: request{op: opRRQ, filename: "ipxe.efi", mode: "octet", options: []option{{"blksize", "9000"}, {"tsize", "0"}}},
		},
		"invalid values left out of the OACK": {
			in:      rq(opRRQ, "f", "octet", "blksize", "7", "timeout", "0", "windowsize", "x", "timeout", "9"),
			maxBlk:  1468,
			want:    params{blksize: 512, window: 1},
			wantReq: request{op: opRRQ, filename: "f", mode: "octet", options: []option{{"blksize", "7"}, {"timeout", "0"}, {"windowsize", "x"}}},
		},
		"timeout and windowsize, capped": {
			in:      rq(opRRQ, "f", "octet", "timeout", "3", "windowsize", "1000"),
			maxBlk:  1468,
			want:    params{blksize: 512, window: maxWindow, timeout: 3 * time.Second, oack: []option{{"timeout", "3"}, {"windowsize", "64"}}},
			wantReq: request{op: opRRQ, filename: "f", mode: "octet", options: []option{{"timeout", "3"}, {"windowsize", "1000"}}},
		},
		"trailing option name without a value": {
			in:      rq(opRRQ, "f", "octet", "tsize"),
			maxBlk:  1468,
			want:    params{blksize: 512, window: 1},
			wantReq: request{op: opRRQ, filename: "f", mode: "octet"},
		},
		"write request": {
			in:      rq(opWRQ, "f", "netascii"),
			want:    params{blksize: 512, window: 1},
			wantReq: request{op: opWRQ, filename: "f", mode: "netascii"},
		},
		"empty":        {in: nil, err: true},
		"ack":          {in: []byte{0, 4, 0, 1}, err: true},
		"no final NUL": {in: []byte("\x00\x01f\x00octet"), err: true},
		"no mode":      {in: []byte("\x00\x01f\x00"), err: true},
		"empty name":   {in: rq(opRRQ, "", "octet"), err: true},
		"bad mode":     {in: rq(opRRQ, "f", "binary"), err: true},
	} {
		t.Run(name, func(t *testing.T) {
			r, err := parseRequest(tc.in)
			if (err != nil) != tc.err {
				t.Fatalf("err %v", err)
			}
			if err != nil {
				return
			}
			if !reflect.DeepEqual(r, tc.wantReq) {
				t.Errorf("request %+v, want %+v", r, tc.wantReq)
			}
			if p := negotiate(r, tc.maxBlk, 1000); !reflect.DeepEqual(p, tc.want) {
				t.Errorf("params %+v, want %+v", p, tc.want)
			}
		})
	}
}

// FuzzParseRequest: any first packet is parsed or refused without a
// panic, and what is parsed negotiates to sane parameters.
func FuzzParseRequest(f *testing.F) {
	f.Add(rq(opRRQ, "ipxe.efi", "octet"))
	f.Add(rq(opRRQ, "ipxe.efi", "octet", "blksize", "1468", "tsize", "0", "windowsize", "8", "timeout", "1"))
	f.Add(rq(opWRQ, "../x", "netascii"))
	f.Add([]byte{0, 1, 0, 0, 0})
	f.Add([]byte{0, 4, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := parseRequest(b)
		if err != nil {
			return
		}
		if r.filename == "" || bytes.IndexByte([]byte(r.filename), 0) >= 0 {
			t.Fatalf("file name %q", r.filename)
		}
		p := negotiate(r, 1468, 850_528)
		if p.blksize < minBlksize || p.blksize > 1468 || p.window < 1 || p.window > maxWindow || p.timeout < 0 || p.timeout > maxTimeout*time.Second {
			t.Fatalf("params %+v from %q", p, b)
		}
		if len(appendOACK(nil, p.oack)) > 2+len(b)+16 {
			t.Fatalf("OACK longer than the request")
		}
	})
}
