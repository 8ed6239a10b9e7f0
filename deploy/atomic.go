package deploy

import (
	"fmt"
	"os"
	"path/filepath"
)

// WriteFileAtomic replaces path with data so that a reader (or a crash)
// sees either the old content or the new one, never a part: a temp file in
// the same directory, fsync, rename over path, fsync of the directory. A
// symlink is written through: its target is replaced and the link stays
// (a fleet.yaml linked into a checkout keeps pointing there). The mode of
// an existing file is kept; perm is for a new one.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	if target, err := filepath.EvalSymlinks(path); err == nil {
		path = target
	}
	if st, err := os.Stat(path); err == nil {
		perm = st.Mode().Perm()
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, tempPattern(path))
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Chmod(perm); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	done = true
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

func tempPattern(path string) string { return "." + filepath.Base(path) + ".tmp*" }

// RemoveTemps deletes the temp files WriteFileAtomic leaves beside path
// when it is killed between creating and renaming one. Only a writer that
// holds the lock over path (LockState) may call it: another writer's temp
// file would go too.
func RemoveTemps(path string) {
	if target, err := filepath.EvalSymlinks(path); err == nil {
		path = target
	}
	m, _ := filepath.Glob(filepath.Join(filepath.Dir(path), tempPattern(path)))
	for _, f := range m {
		os.Remove(f)
	}
}
