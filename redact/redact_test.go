package redact

import (
	"strings"
	"testing"
)

func TestJSON(t *testing.T) {
	t.Parallel()
	r := New(DefaultFragments)
	cases := map[string]string{
		`{"password": "hunter2", "user": "ann"}`:                    `{"password":"[redacted]","user":"ann"}`,
		`{"nested": {"API_KEY": 42, "list": [{"x_token": "abc"}]}}`: `{"nested":{"API_KEY":"[redacted]","list":[{"x_token":"[redacted]"}]}}`,
		`[1, 2.50, {"secret": null}]`:                               `[1,2.50,{"secret":"[redacted]"}]`,
		`"plain"`:                                                   `"plain"`,
		`{not json`:                                                 `"[redacted]"`,
	}
	for in, want := range cases {
		if got := string(r.JSON([]byte(in))); got != want {
			t.Errorf("JSON(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestText(t *testing.T) {
	t.Parallel()
	r := New(DefaultFragments)
	cases := map[string]string{
		`login failed: password=hunter2 user=ann`:                               `login failed: password=[redacted] user=ann`,
		`bad input {"password": "hunter2"}`:                                     `bad input {"password": [redacted]}`,
		`Authorization: Bearer hunter2, next`:                                   `Authorization: [redacted], next`,
		`no secrets here`:                                                       `no secrets here`,
		`bad {"api_key": {"v": "hunter2", "w": ["}", "hunter2"]}, "to": "ann"}`: `bad {"api_key": [redacted], "to": "ann"}`,
		`bad {"token": ["hunter2", {"a": "hunter2"}]}`:                          `bad {"token": [redacted]}`,
		`cut short {"secret": {"a": "hunter2"`:                                  `cut short {"secret": [redacted]`,
	}
	for in, want := range cases {
		if got := r.Text(in); got != want {
			t.Errorf("Text(%q) = %q, want %q", in, got, want)
		}
		if strings.Contains(r.Text(in), "hunter2") {
			t.Errorf("Text(%q) leaks", in)
		}
	}
}
