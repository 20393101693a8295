package decide_test

import (
	"reflect"
	"testing"

	"github.com/fleet-go/fleet/decide"
	"github.com/fleet-go/fleet/model"
)

func TestLongWaits(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		waits      map[string]float64
		thresholds map[string]int
		want       []model.LongWaitDetected
	}{
		{name: "nothing", want: nil},
		{name: "no threshold", waits: map[string]float64{"a": 100}, want: nil},
		{name: "threshold off", waits: map[string]float64{"a": 100}, thresholds: map[string]int{"a": 0}, want: nil},
		{name: "negative threshold is off", waits: map[string]float64{"a": 100}, thresholds: map[string]int{"a": -1}, want: nil},
		{name: "below", waits: map[string]float64{"a": 59.999}, thresholds: map[string]int{"a": 60}, want: nil},
		{
			name: "at the threshold counts", waits: map[string]float64{"a": 60}, thresholds: map[string]int{"a": 60},
			want: []model.LongWaitDetected{{Queue: "a", WaitSecs: 60, ThresholdSecs: 60}},
		},
		{
			name: "no ready job is no wait", waits: map[string]float64{}, thresholds: map[string]int{"a": 1},
			want: nil,
		},
		{
			name:       "sorted by queue, rounded to the millisecond",
			waits:      map[string]float64{"mail": 90.12345, "default": 10, "exports": 301.9996, "slow": 5},
			thresholds: map[string]int{"mail": 60, "default": 30, "exports": 300, "slow": 1},
			want: []model.LongWaitDetected{
				{Queue: "exports", WaitSecs: 302, ThresholdSecs: 300},
				{Queue: "mail", WaitSecs: 90.123, ThresholdSecs: 60},
				{Queue: "slow", WaitSecs: 5, ThresholdSecs: 1},
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if got := decide.LongWaits(c.waits, c.thresholds); !reflect.DeepEqual(got, c.want) {
				t.Errorf("LongWaits(%v, %v) = %+v, want %+v", c.waits, c.thresholds, got, c.want)
			}
		})
	}
}
