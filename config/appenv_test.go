package config

import (
	"reflect"
	"testing"
)

// APP_ variables outside fleet's sections are the application's own.
func TestLoadIgnoresTheAppsOwnVariables(t *testing.T) {
	cfg := mustLoad(t, map[string]string{".env": "APP_STRIPE_KEY=sk_live_x\nAPP_MAILER__HOST=smtp\nAPP_QUEUE__WORKERS=6\n"},
		"APP_SECRET_KEY=x", "APP_DEBUG=1", "APP_=1", "APP___X=1", "APP_MYAPP__PORT=80", "APP_QUEUES=a,b", "APP_LOG__LEVEL=warn")
	want := Default()
	want.Queue.Workers = 6
	want.Log.Level = "warn"
	if !reflect.DeepEqual(*cfg, want) {
		t.Fatalf("got %+v\nwant %+v", *cfg, want)
	}
	// A misspelt key inside a known section is still an error naming it,
	// whatever the case of the section.
	_, err := loadFiles(t, nil, "APP_SECRET_KEY=x", "APP_Fleet__ONLYY=a")
	wantError(t, err, "environment APP_Fleet__ONLYY: unknown key fleet.onlyy")
}
