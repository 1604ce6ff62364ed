module github.com/eddy-go/eddy

go 1.26.0
