// The embedding guide's application (docs/embedding.md), a module of its
// own. The replace builds it against this checkout; an app of your own has
// none. TestEmbeddingGuide copies main.go out and builds and runs it.
module example.com/shop

go 1.26.0

require github.com/fleet-go/fleet v0.0.0-00010101000000-000000000000

replace github.com/fleet-go/fleet => ../..
