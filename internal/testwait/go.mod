module github.com/l4xg/grid/internal/testwait

go 1.25.0
