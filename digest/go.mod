module github.com/l4xg/grid/digest

go 1.25.0

require (
	github.com/dgryski/go-farm v0.0.0-20240924180020-3414d57e47da
	pgregory.net/rapid v1.3.0
)
