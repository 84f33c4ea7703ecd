package rollout

import (
	"errors"
	"testing"
	"time"

	"github.com/bootops/bootops/plan"
)

func TestParseMaxUnavailable(t *testing.T) {
	tests := map[string]struct {
		in   string
		size int
		want int
		err  bool
	}{
		"count":                   {in: "1", size: 10, want: 1},
		"count above the group":   {in: "50", size: 10, want: 50},
		"percent rounds down":     {in: "15%", size: 10, want: 1},
		"percent of many":         {in: "10%", size: 10000, want: 1000},
		"percent at least one":    {in: "1%", size: 10, want: 1},
		"percent of an empty set": {in: "50%", size: 0, want: 1},
		"all":                     {in: "100%", size: 7, want: 7},
		"zero":                    {in: "0", size: 10, err: true},
		"zero percent":            {in: "0%", size: 10, err: true},
		"negative":                {in: "-1", size: 10, err: true},
		"signed":                  {in: "+1", size: 10, err: true},
		"over 100%":               {in: "150%", size: 10, err: true},
		"junk":                    {in: "one", size: 10, err: true},
		"empty":                   {in: "", size: 10, err: true},
		"bare percent":            {in: "%", size: 10, err: true},
		"space":                   {in: " 1", size: 10, err: true},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := ParseMaxUnavailable(tt.in, tt.size)
			if tt.err {
				if !errors.Is(err, ErrPolicy) {
					t.Fatalf("ParseMaxUnavailable(%q) = %d, %v; want an ErrPolicy", tt.in, got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseMaxUnavailable(%q, %d) = %d, %v; want %d", tt.in, tt.size, got, err, tt.want)
			}
		})
	}
}

func TestInWindow(t *testing.T) {
	// 2026-03-02 is a Monday; Paris is UTC+1 in March before the change.
	day := func(d, hh, mm int) time.Time { return time.Date(2026, time.March, d, hh, mm, 0, 0, time.UTC) }
	night := &plan.Window{Days: []string{"mon"}, Start: "22:00", End: "02:00"}
	tests := map[string]struct {
		w    *plan.Window
		now  time.Time
		want bool
		err  bool
	}{
		"no window":                 {w: nil, now: day(2, 12, 0), want: true},
		"every day, inside":         {w: &plan.Window{Start: "02:00", End: "06:00"}, now: day(4, 2, 0), want: true},
		"start is inclusive":        {w: &plan.Window{Start: "02:00", End: "06:00"}, now: day(2, 2, 0), want: true},
		"a minute before start":     {w: &plan.Window{Start: "02:00", End: "06:00"}, now: day(2, 1, 59), want: false},
		"end is exclusive":          {w: &plan.Window{Start: "02:00", End: "06:00"}, now: day(2, 6, 0), want: false},
		"last minute":               {w: &plan.Window{Start: "02:00", End: "06:00"}, now: day(2, 5, 59), want: true},
		"listed day":                {w: &plan.Window{Days: []string{"sat", "mon"}, Start: "02:00", End: "06:00"}, now: day(2, 3, 0), want: true},
		"unlisted day":              {w: &plan.Window{Days: []string{"tue"}, Start: "02:00", End: "06:00"}, now: day(2, 3, 0), want: false},
		"overnight, evening":        {w: night, now: day(2, 22, 0), want: true},
		"overnight, before opening": {w: night, now: day(2, 21, 59), want: false},
		"overnight, next morning":   {w: night, now: day(3, 1, 59), want: true},
		"overnight, closed":         {w: night, now: day(3, 2, 0), want: false},
		// Monday morning belongs to Sunday's window, which is not listed.
		"overnight, morning of the listed day": {w: night, now: day(2, 1, 0), want: false},
		"overnight, evening of the next day":   {w: night, now: day(3, 23, 0), want: false},
		"start equals end is all day":          {w: &plan.Window{Start: "04:00", End: "04:00"}, now: day(2, 3, 59), want: true},
		"timezone shifts the clock":            {w: &plan.Window{Start: "02:00", End: "06:00", Timezone: "Europe/Paris"}, now: day(2, 1, 0), want: true},
		"timezone shifts out":                  {w: &plan.Window{Start: "02:00", End: "06:00", Timezone: "Europe/Paris"}, now: day(2, 5, 30), want: false},
		"timezone shifts the day":              {w: &plan.Window{Days: []string{"tue"}, Start: "00:00", End: "01:00", Timezone: "Asia/Tokyo"}, now: day(2, 15, 30), want: true},
		"bad day":                              {w: &plan.Window{Days: []string{"monday"}, Start: "02:00", End: "06:00"}, err: true},
		"bad start":                            {w: &plan.Window{Start: "2:00", End: "06:00"}, err: true},
		"bad end":                              {w: &plan.Window{Start: "02:00", End: "24:00"}, err: true},
		"bad timezone":                         {w: &plan.Window{Start: "02:00", End: "06:00", Timezone: "Mars/Olympus"}, err: true},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := InWindow(tt.now, tt.w)
			if tt.err {
				if !errors.Is(err, ErrPolicy) {
					t.Fatalf("InWindow = %v, %v; want an ErrPolicy", got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("InWindow(%s) = %v, %v; want %v", tt.now.Format(time.RFC3339), got, err, tt.want)
			}
		})
	}
}
