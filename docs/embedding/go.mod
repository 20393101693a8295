// The embedding guide's application (docs/embedding.md), a module of its
// own, as the guide's step 1 and `go mod tidy` make it; its replace points
// at this checkout, two directories up, where the guide's points at
// ../fleet. TestEmbeddingGuide runs the guide's commands, then builds
// main.go and runs it.
module example.com/shop

go 1.26.0

require github.com/fleet-go/fleet v0.0.0-00010101000000-000000000000

replace github.com/fleet-go/fleet => ../..
