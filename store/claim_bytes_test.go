package store_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleet-go/fleet/pgtest"
	"github.com/fleet-go/fleet/store"
)

// randomPayload is a JSON object holding n random hex digits: a payload
// the server stores as it is, uncompressed.
func randomPayload(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n/2)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return fmt.Appendf(nil, `{"d":%q}`, hex.EncodeToString(b))
}

// storedSizes returns the size the claim counts of each job of queue q
// (the stored jsonb's, or the JSON text's for a compressed value), by id,
// and whether each is compressed.
func storedSizes(t *testing.T, ctx context.Context, st *pgxpool.Pool, q string) (map[int64]int64, map[int64]bool) {
	t.Helper()
	rows, err := st.Query(ctx, `SELECT id, pg_column_size(payload), octet_length(payload::text), pg_column_compression(payload) IS NOT NULL
		FROM queue_jobs WHERE queue = $1`, q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	sizes, compressed := map[int64]int64{}, map[int64]bool{}
	for rows.Next() {
		var id, stored, text int64
		var c bool
		if err := rows.Scan(&id, &stored, &text, &c); err != nil {
			t.Fatal(err)
		}
		sizes[id], compressed[id] = stored, c
		if c {
			sizes[id] = text
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return sizes, compressed
}

func claimedIDs(jobs []store.ClaimedJob) []int64 {
	ids := make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	return ids
}

// TestJobClaimCutsToMaxBytes: a claim with MaxBytes takes its picked jobs
// in pick order while their payloads add up to at most MaxBytes, and no
// job past the first that does not fit; its first job whatever its size
// only with FirstAnySize; and it counts a compressed payload by its JSON
// text, not by its compressed size.
func TestJobClaimCutsToMaxBytes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	st := store.New(pool)

	// Queue "r": ten uncompressed payloads of about 20 kB; queue "big": a
	// large one at priority 0, then small ones at priority 1 that would
	// fit beside it; queue "z": two compressible payloads of 100 kB.
	var params []store.JobInsertParams
	for range 10 {
		params = append(params, store.JobInsertParams{Queue: "r", Name: "n", Payload: randomPayload(t, 20000)})
	}
	params = append(params, store.JobInsertParams{Queue: "big", Name: "n", Payload: randomPayload(t, 60000), Priority: 0})
	for range 3 {
		params = append(params, store.JobInsertParams{Queue: "big", Name: "n", Payload: randomPayload(t, 1000), Priority: 1})
	}
	for range 2 {
		params = append(params, store.JobInsertParams{Queue: "z", Name: "n",
			Payload: fmt.Appendf(nil, `{"d":%q}`, strings.Repeat("abcd", 25000))})
	}
	ids, err := st.JobInsertMany(ctx, pool, params)
	if err != nil {
		t.Fatal(err)
	}
	sizes, compressed := storedSizes(t, ctx, pool, "r")
	s := sizes[ids[0]]
	for _, id := range ids[:10] {
		if compressed[id] || sizes[id] != s {
			t.Fatalf("job %d: stored size %d (compressed %v), want %d uncompressed like the others", id, sizes[id], compressed[id], s)
		}
	}

	claim := func(q string, limit int, maxBytes int64, first bool) []store.ClaimedJob {
		t.Helper()
		jobs, err := st.JobClaim(ctx, store.JobClaimParams{Queue: q, Limit: limit, Worker: "w",
			MaxBytes: maxBytes, FirstAnySize: first})
		if err != nil {
			t.Fatal(err)
		}
		return jobs
	}
	// Two and a half payloads' worth: two, the oldest, though the limit
	// allows ten.
	if got := claimedIDs(claim("r", 10, 5*s/2, false)); !slices.Equal(got, ids[:2]) {
		t.Fatalf("a claim of 2.5 payloads' bytes took %v, want %v", got, ids[:2])
	}
	// Exactly three payloads' worth: three.
	if got := claimedIDs(claim("r", 10, 3*s, false)); !slices.Equal(got, ids[2:5]) {
		t.Fatalf("a claim of 3 payloads' bytes took %v, want %v", got, ids[2:5])
	}
	// Less than one: none, unless the first job may be of any size; the
	// limit still applies.
	if got := claim("r", 10, s-1, false); len(got) != 0 {
		t.Fatalf("a claim of less than a payload's bytes took %v, want none", claimedIDs(got))
	}
	if got := claimedIDs(claim("r", 10, s-1, true)); !slices.Equal(got, ids[5:6]) {
		t.Fatalf("a first claim of less than a payload's bytes took %v, want %v", got, ids[5:6])
	}
	if got := claimedIDs(claim("r", 2, 100*s, false)); !slices.Equal(got, ids[6:8]) {
		t.Fatalf("a claim of 2 with room for 100 took %v, want %v", got, ids[6:8])
	}
	// No bound: the limit alone.
	if got := claimedIDs(claim("r", 10, 0, false)); !slices.Equal(got, ids[8:10]) {
		t.Fatalf("a claim with no byte bound took %v, want %v", got, ids[8:10])
	}

	// The large job comes first in pick order (priority 0): a claim with
	// room for the small ones but not for it takes nothing rather than
	// pass it over, and a first claim takes it alone.
	bigSizes, _ := storedSizes(t, ctx, pool, "big")
	big := bigSizes[ids[10]]
	if got := claim("big", 10, big-1, false); len(got) != 0 {
		t.Fatalf("a claim with no room for the first job took %v, want none", claimedIDs(got))
	}
	if got := claimedIDs(claim("big", 10, big-1, true)); !slices.Equal(got, ids[10:11]) {
		t.Fatalf("a first claim with no room for the first job took %v, want it alone (%v)", got, ids[10:11])
	}
	if got := claimedIDs(claim("big", 10, 1<<20, false)); !slices.Equal(got, ids[11:14]) {
		t.Fatalf("the small jobs: %v, want %v", got, ids[11:14])
	}

	// Compressed payloads count by their JSON text (as the server writes
	// it, with a space after each colon): room for one and a half takes
	// one, though both would fit by their stored size.
	zSizes, zCompressed := storedSizes(t, ctx, pool, "z")
	text := zSizes[ids[14]]
	for _, id := range ids[14:] {
		if !zCompressed[id] || zSizes[id] != text || text < int64(len(params[14].Payload)) {
			t.Fatalf("job %d: counted size %d (compressed %v), want the JSON text's, %d bytes or more, compressed",
				id, zSizes[id], zCompressed[id], len(params[14].Payload))
		}
	}
	var stored int64
	if err := pool.QueryRow(ctx, `SELECT sum(pg_column_size(payload)) FROM queue_jobs WHERE queue = 'z'`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if room := 3 * text / 2; stored > room {
		t.Fatalf("the compressed payloads take %d bytes stored, more than %d: the test cannot tell the sizes apart", stored, room)
	}
	if got := claimedIDs(claim("z", 10, 3*text/2, false)); !slices.Equal(got, ids[14:15]) {
		t.Fatalf("a claim of 1.5 compressed payloads' text took %v, want %v", got, ids[14:15])
	}
}
