package config

import (
	"errors"
	"reflect"
	"testing"
)

// envTarget has field types Config does not use yet, to show that the
// override code handles new fields without change.
type envTarget struct {
	Ratio   float64                   `toml:"ratio"`
	Limit   uint16                    `toml:"limit"`
	Flags   []bool                    `toml:"flags"`
	Counts  map[string]*int           `toml:"counts"`
	Nested  *envNested                `toml:"nested"`
	Deep    map[string]map[string]int `toml:"deep"`
	Untaged string
	Skipped string `toml:"-"`
	Opt     string `toml:"opt,omitempty"`
}

type envNested struct {
	Name string `toml:"name"`
}

func TestSetKeyGeneric(t *testing.T) {
	var got envTarget
	v := reflect.ValueOf(&got).Elem()
	sets := []struct {
		path []string
		raw  string
	}{
		{[]string{"ratio"}, "0.5"},
		{[]string{"limit"}, "65535"},
		{[]string{"flags"}, "true,0,FALSE,1"},
		{[]string{"counts", "a"}, "7"},
		{[]string{"nested", "name"}, "n"},
		{[]string{"deep", "x", "y"}, "3"},
		{[]string{"untaged"}, "u"},
		{[]string{"opt"}, "o"},
	}
	for _, s := range sets {
		if err := setKey(v, s.path, s.raw); err != nil {
			t.Fatalf("setKey(%v, %q): %v", s.path, s.raw, err)
		}
	}
	want := envTarget{
		Ratio:   0.5,
		Limit:   65535,
		Flags:   []bool{true, false, false, true},
		Counts:  map[string]*int{"a": intPtr(7)},
		Nested:  &envNested{Name: "n"},
		Deep:    map[string]map[string]int{"x": {"y": 3}},
		Untaged: "u",
		Opt:     "o",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func TestSetKeyErrors(t *testing.T) {
	tests := []struct {
		path     []string
		raw      string
		wantKind error  // unknownKey or tableKey
		expected string // for value errors
	}{
		{path: []string{"skipped"}, wantKind: unknownKey},
		{path: []string{"nope"}, wantKind: unknownKey},
		{path: []string{"ratio", "x"}, wantKind: unknownKey},
		{path: []string{"nested"}, wantKind: tableKey},
		{path: []string{"counts"}, wantKind: tableKey},
		{path: []string{"deep", "x"}, wantKind: tableKey},
		{path: []string{"limit"}, raw: "-1", expected: "a non-negative integer"},
		{path: []string{"limit"}, raw: "65536", expected: "a non-negative integer"},
		{path: []string{"ratio"}, raw: "half", expected: "a number"},
		{path: []string{"flags"}, raw: "true,yes", expected: "a list of booleans"},
		{path: []string{"counts", "a"}, raw: "", expected: "an integer"},
	}
	for _, tt := range tests {
		var target envTarget
		err := setKey(reflect.ValueOf(&target).Elem(), tt.path, tt.raw)
		if tt.wantKind != nil {
			if !errors.Is(err, tt.wantKind) {
				t.Errorf("setKey(%v): got %v, want %v", tt.path, err, tt.wantKind)
			}
			continue
		}
		var ve *valueError
		if !errors.As(err, &ve) || ve.expected != tt.expected {
			t.Errorf("setKey(%v, %q): got %v, want expected %q", tt.path, tt.raw, err, tt.expected)
		}
	}
}

// A failed override leaves an existing map entry as it was.
func TestSetKeyFailureKeepsMapEntry(t *testing.T) {
	target := envTarget{Deep: map[string]map[string]int{"x": {"y": 1}}}
	v := reflect.ValueOf(&target).Elem()
	if err := setKey(v, []string{"counts", "a"}, "x"); err == nil {
		t.Fatal("got no error")
	}
	if _, ok := target.Counts["a"]; ok {
		t.Error("failed override created a map entry")
	}
	if err := setKey(v, []string{"deep", "x", "z"}, "2"); err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"y": 1, "z": 2}; !reflect.DeepEqual(target.Deep["x"], want) {
		t.Errorf("deep[x] = %v, want %v", target.Deep["x"], want)
	}
}

func TestEnvKeyPath(t *testing.T) {
	tests := []struct {
		name string
		want []string
		err  bool
	}{
		{name: "APP_QUEUE__WORKERS", want: []string{"queue", "workers"}},
		{name: "APP_FLEET__SUPERVISORS__DEFAULT__MAX_PROCESSES", want: []string{"fleet", "supervisors", "default", "max_processes"}},
		{name: "APP_Queue__Workers", want: []string{"queue", "workers"}},
		{name: "APP_DEBUG", want: []string{"debug"}},
		{name: "APP_QUEUE___X", want: []string{"queue", "_x"}},
		{name: "APP_", err: true},
		{name: "APP___X", err: true},
		{name: "APP_X__", err: true},
		{name: "APP_X____Y", err: true},
	}
	for _, tt := range tests {
		got, err := envKeyPath(tt.name)
		if (err != nil) != tt.err || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("envKeyPath(%q) = %q, %v; want %q, error %v", tt.name, got, err, tt.want, tt.err)
		}
	}
}

func TestOverridesOrderAndShadowing(t *testing.T) {
	env := parseEnviron([]string{"APP_QUEUE__B=2", "APP_QUEUE__A=1", "APP_CONFIG=x.toml", "APP_ENV=prod", "PATH=/bin",
		"APP_LOG__D=env", "APP_SECRET_KEY=s", "APP_DEBUG__X=1"})
	dotenv := []dotenvVar{
		{name: "APP_LOG__D", value: "dotenv", line: 1},
		{name: "APP_FLEET__C", value: "3", line: 2},
		{name: "APP_ENV", value: "dev", line: 3},
		{name: "OTHER", value: "x", line: 4},
		{name: "APP_Database__E", value: "5"},
		{name: "APP_API_TOKEN", value: "t", line: 6},
	}
	got := overrides(env, dotenv)
	want := []override{
		{name: "APP_FLEET__C", value: "3", where: ".env:2: APP_FLEET__C"},
		{name: "APP_Database__E", value: "5", where: ".env APP_Database__E"},
		{name: "APP_LOG__D", value: "env", where: "environment APP_LOG__D"},
		{name: "APP_QUEUE__A", value: "1", where: "environment APP_QUEUE__A"},
		{name: "APP_QUEUE__B", value: "2", where: "environment APP_QUEUE__B"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func TestQuoteValue(t *testing.T) {
	tests := []struct {
		value   string
		secrets []string
		want    string
	}{
		{"many", nil, `"many"`},
		{"postgres://u:pw@h/db", nil, `"postgres://u:xxxxx@h/db"`},
		{"host=h password=pw", nil, `"host=h password=xxxxx"`},
		{"hunter2", []string{"hunter2"}, `"xxxxx"`},
		{"a,hunter2", []string{"", "hunter2"}, `"a,xxxxx"`},
		{"tab\there", nil, `"tab\there"`},
	}
	for _, tt := range tests {
		if got := quoteValue(tt.value, tt.secrets); string(got) != tt.want {
			t.Errorf("quoteValue(%q) = %s, want %s", tt.value, got, tt.want)
		}
	}
}
