package boot

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestCredential(t *testing.T) {
	s := Secret(strings.Repeat("s", 32))
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	g := Grant{Kind: KindBoot, Site: "lab", Subject: "n1", Generation: 3, ID: NewID(), Expires: now.Add(time.Minute)}
	tok := s.Mint(g)
	for i := 0; i < len(tok); i++ {
		if c := tok[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.') {
			t.Fatalf("token %q: %q is not safe on a kernel command line", tok, c)
		}
	}
	got, err := s.Verify(tok, KindBoot, "lab", "n1", now)
	if err != nil || got.Generation != 3 || got.ID != g.ID || !got.Expires.Equal(g.Expires) {
		t.Fatalf("verify: %+v %v", got, err)
	}
	flip := func(i int) string {
		b := []byte(tok)
		if b[i] == '1' {
			b[i] = '2'
		} else if b[i] != '.' {
			b[i] = '1'
		}
		return string(b)
	}
	for name, c := range map[string]struct {
		tok, kind, site, subject string
		at                       time.Time
		want                     error
	}{
		"other node":      {tok, KindBoot, "lab", "n2", now, ErrBadCredential},
		"other site":      {tok, KindBoot, "lab2", "n1", now, ErrBadCredential},
		"generation":      {flip(3), KindBoot, "lab", "n1", now, ErrBadCredential},
		"expiry":          {flip(6), KindBoot, "lab", "n1", now, ErrBadCredential},
		"id":              {flip(len(tok) - 40), KindBoot, "lab", "n1", now, ErrBadCredential},
		"tag":             {flip(len(tok) - 1), KindBoot, "lab", "n1", now, ErrBadCredential},
		"as a session":    {tok, KindSession, "lab", "n1", now, ErrWrongKind},
		"expired":         {tok, KindBoot, "lab", "n1", now.Add(time.Minute), ErrExpired},
		"empty":           {"", KindBoot, "lab", "n1", now, ErrBadCredential},
		"other secret":    {Secret(strings.Repeat("t", 32)).Mint(g), KindBoot, "lab", "n1", now, ErrBadCredential},
		"too many fields": {tok + ".x", KindBoot, "lab", "n1", now, ErrBadCredential},
	} {
		if _, err := s.Verify(c.tok, c.kind, c.site, c.subject, c.at); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
	if a, b := NewID(), NewID(); a == b {
		t.Error("two IDs alike")
	}
}
