package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"
)

// WebhookNotifier returns a long-wait listener that POSTs each alert as
// JSON ({"event":"long_wait_detected","queue":...,"wait_secs":...,
// "threshold_secs":...}) to target, with a 10 s timeout. Failures are logged
// with the target's host only: a webhook URL often carries a secret.
func WebhookNotifier(target string, client *http.Client, log *slog.Logger) (func(context.Context, LongWaitDetected), error) {
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("fleet.long_wait_webhook must be an http(s) URL")
	}
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	host := u.Host
	return func(ctx context.Context, e LongWaitDetected) {
		body, _ := json.Marshal(struct {
			Event string `json:"event"`
			LongWaitDetected
		}{"long_wait_detected", e})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
		if err != nil {
			log.Error("long-wait webhook: build request", "host", host, "err", err)
			return
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			log.Error("long-wait webhook failed", "host", host, "queue", e.Queue, "err", redactURLError(err))
			return
		}
		resp.Body.Close()
		if resp.StatusCode >= 300 {
			log.Error("long-wait webhook refused", "host", host, "queue", e.Queue, "status", resp.StatusCode)
		}
	}, nil
}

// redactURLError drops the URL from a *url.Error, keeping what went wrong.
func redactURLError(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	return err
}
