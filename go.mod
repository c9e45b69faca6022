module github.com/sluice-go/sluice

go 1.26
