package serve

import (
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// debounce is how long the files must be quiet before a change reloads, so
// that an editor's or a deploy's several writes make one reload.
const debounce = 150 * time.Millisecond

// watchFiles reports changes to path (a file, or a directory and the files
// in it) on the returned channel, debounced. A file is watched through its
// directory, so that a replacement by rename (editors, Kubernetes ConfigMaps)
// is seen.
func watchFiles(path string, log *slog.Logger) (<-chan struct{}, func(), error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, nil, err
	}
	path = filepath.Clean(path)
	st, err := os.Stat(path)
	if err != nil {
		w.Close()
		return nil, nil, err
	}
	dir, file := path, ""
	if !st.IsDir() {
		dir, file = filepath.Dir(path), filepath.Base(path)
	}
	if err := w.Add(dir); err != nil {
		w.Close()
		return nil, nil, err
	}
	out := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		var t *time.Timer
		var fire <-chan time.Time
		for {
			select {
			case <-done:
				if t != nil {
					t.Stop()
				}
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if file != "" && filepath.Base(ev.Name) != file && filepath.Base(ev.Name) != "..data" {
					continue
				}
				if t == nil {
					t = time.NewTimer(debounce)
				} else {
					t.Reset(debounce)
				}
				fire = t.C
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				log.Warn("watching the configuration", "err", err)
			case <-fire:
				fire = nil
				select {
				case out <- struct{}{}:
				default:
				}
			}
		}
	}()
	return out, func() { close(done); w.Close() }, nil
}
