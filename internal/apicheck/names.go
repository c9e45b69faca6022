package main

import (
	"bufio"
	"regexp"
	"strings"
)

// A change is one incompatible change to a library package's exported API.
type change struct {
	pkg  string // the package's import path
	msg  string // what apidiff says of it ("(*Limiter).Take: removed"), or "package removed"
	name string // how CHANGELOG.md names it: "sluice.Limiter.Take", or the import path
}

// removal is the change of a package that the working tree no longer has:
// its name is its import path.
func removal(path string) change {
	return change{pkg: path, msg: "package removed", name: path}
}

// apidiffChange is the change apidiff reports as msg ("Subject: what
// changed") in the package at path whose name is pkgName.
func apidiffChange(path, pkgName, msg string) change {
	return change{pkg: path, msg: msg, name: changeName(pkgName, msg)}
}

// what is the part of the change's message after its subject.
func (c change) what() string {
	if _, w, ok := strings.Cut(c.msg, ": "); ok {
		return w
	}
	return c.msg
}

var typeArgs = regexp.MustCompile(`\[[^\[\]]*\]`)

// changeName names the change apidiff reports as msg in the package named
// pkgName as Go code would write the name: the package's name, a dot, the
// identifier, and for a method or field the type's name, a dot, the member
// ("sluice.TakeEach", "sluice.Limiter.Take", "sluice.Result.Window").
// apidiff's "(*T).M" is T.M, a generic type's parameters are dropped
// ("GR[R].M" is GR.M), "(*e).M, method set of *T" (a method promoted from
// an unexported embedded type) is T.M, and an object of another package
// that apidiff names by its path ("./store.Request", or
// "github.com/…/internal/algo.State") is qualified by that package's last
// path element ("store.Request", "algo.State").
func changeName(pkgName, msg string) string {
	subject, _, _ := strings.Cut(msg, ": ")
	if left, typ, ok := strings.Cut(subject, ", method set of "); ok {
		subject = strings.TrimPrefix(typ, "*") + "." + left[strings.LastIndexByte(left, '.')+1:]
	}
	for typeArgs.MatchString(subject) { // nested: GR[M[T]]
		subject = typeArgs.ReplaceAllString(subject, "")
	}
	subject = strings.NewReplacer("(*", "", "(", "", ")", "").Replace(subject)
	qualifier := pkgName
	if i := strings.LastIndexByte(subject, '/'); i >= 0 {
		if p, rest, ok := strings.Cut(subject[i+1:], "."); ok {
			qualifier, subject = p, rest
		}
	}
	return qualifier + "." + subject
}

// breakingNames returns the names in backticks in the "### Breaking"
// subsection of CHANGELOG.md's "## Unreleased" section (up to the next
// heading of either level), and whether the file has that subsection.
func breakingNames(changelog string) (names map[string]bool, found bool) {
	names = map[string]bool{}
	inUnreleased, inBreaking := false, false
	tick := regexp.MustCompile("`([^`]+)`")
	s := bufio.NewScanner(strings.NewReader(changelog))
	s.Buffer(nil, 1<<20)
	for s.Scan() {
		line := strings.TrimRight(s.Text(), " \t\r")
		switch {
		case strings.HasPrefix(line, "## "):
			if inUnreleased {
				return names, found // the next release's section
			}
			text := strings.TrimPrefix(strings.TrimSpace(line[3:]), "[")
			inUnreleased = strings.HasPrefix(text, "Unreleased")
		case strings.HasPrefix(line, "### "):
			inBreaking = inUnreleased && strings.HasPrefix(strings.TrimSpace(line[4:]), "Breaking")
			found = found || inBreaking
		case inBreaking:
			for _, m := range tick.FindAllStringSubmatch(line, -1) {
				names[strings.TrimSpace(m[1])] = true
			}
		}
	}
	return names, found
}

// named reports whether names holds the change's name, or, for a name
// inside a package (not a package's removal), a name that contains it:
// "sluice.Limiter" names every change to Limiter's methods and fields
// ("sluice.Limiter.Take"). A package's name alone ("sluice") names nothing.
func named(names map[string]bool, c change) bool {
	if names[c.name] {
		return true
	}
	if strings.Contains(c.name, "/") {
		return false
	}
	n := c.name
	for {
		i := strings.LastIndexByte(n, '.')
		if i < 0 {
			return false
		}
		n = n[:i]
		if !strings.Contains(n, ".") {
			return false
		}
		if names[n] {
			return true
		}
	}
}
