package model_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/fleet-go/fleet/model"
	"github.com/fleet-go/fleet/supervisor"
)

// Each not-found error matches itself and ErrNotFound, wrapped or not, and
// no other kind.
func TestNotFoundErrors(t *testing.T) {
	t.Parallel()
	kinds := map[error]string{
		model.ErrFailedJobNotFound: "failed job not found",
		model.ErrJobNotFound:       "job not found",
		model.ErrTokenNotFound:     "token not found",
	}
	for err, msg := range kinds {
		wrapped := fmt.Errorf("read 7: %w", err)
		if err.Error() != msg || wrapped.Error() != "read 7: "+msg {
			t.Errorf("messages %q, %q; want %q", err, wrapped, msg)
		}
		if !errors.Is(wrapped, err) || !errors.Is(wrapped, model.ErrNotFound) {
			t.Errorf("%q does not match its own kind or ErrNotFound", wrapped)
		}
		for other := range kinds {
			if other != err && errors.Is(wrapped, other) {
				t.Errorf("%q matches %q", wrapped, other)
			}
		}
		var nf *model.NotFoundError
		if !errors.As(wrapped, &nf) || nf.What+" not found" != msg {
			t.Errorf("errors.As(%q) = %v", wrapped, nf)
		}
	}
	if errors.Is(errors.New("job not found"), model.ErrNotFound) {
		t.Error("an error of the same text matches ErrNotFound")
	}
}

// A report reads back as the master wrote it, and each reader's view of
// an unreadable one is empty.
func TestReportRoundTrip(t *testing.T) {
	t.Parallel()
	claim := 3
	want := model.MasterReport{
		Supervisors: []model.ReportedSupervisor{
			{Name: "default", Queues: []string{"default", "mail"}, Balance: "auto", Processes: map[string]int{"default": 1, "mail": 2}, Running: 3, Claim: &claim},
			{Name: "exports", Queues: []string{"exports"}, Balance: "off", Paused: true, Processes: map[string]int{"exports": 0}},
		},
		JobsPerMinute: 12.5, MemoryMB: 40,
		Connections: &supervisor.Budget{Master: 5, Worker: 3, Processes: 4, Total: 17},
	}
	raw, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := model.DecodeReport(raw)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("DecodeReport = %+v, %v; want %+v", got, err, want)
	}
	sups, err := model.DecodeSupervisors(model.SupervisorsJSON(raw))
	if err != nil || !reflect.DeepEqual(sups, want.Supervisors) {
		t.Errorf("DecodeSupervisors(SupervisorsJSON) = %+v, %v; want %+v", sups, err, want.Supervisors)
	}

	// An earlier master's report, without claims or a budget.
	old := []byte(`{"supervisors":[{"name":"w","queues":["q"],"processes":{"q":1}}],"jobs_per_minute":1,"memory_mb":2}`)
	if r, err := model.DecodeReport(old); err != nil || r.Connections != nil || len(r.Supervisors) != 1 || r.Supervisors[0].Claim != nil {
		t.Errorf("DecodeReport(earlier) = %+v, %v", r, err)
	}

	for _, bad := range []string{`not json`, `{"supervisors":"not an array"}`, `{}`, ``} {
		if got := string(model.SupervisorsJSON([]byte(bad))); bad != `{"supervisors":"not an array"}` && got != `[]` {
			t.Errorf("SupervisorsJSON(%q) = %s, want []", bad, got)
		}
		if sups, err := model.DecodeSupervisors(model.SupervisorsJSON([]byte(bad))); len(sups) != 0 {
			t.Errorf("DecodeSupervisors of %q = %+v, %v; want none", bad, sups, err)
		}
	}
}
