package diskstore

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvtier/kvtier/kvcache"
	"github.com/kvtier/kvtier/tierstore"
)

// Options configures a Store.
type Options struct {
	// Dir is the directory that holds the files. Open creates it (mode
	// 0700) when it is missing. Several stores, in this process or others,
	// may share it.
	Dir string
	// Fingerprint names the deployment whose units the store holds (see
	// tierstore.Fingerprint). Its files are kept under a directory of
	// their own, and stores of other deployments never read them.
	Fingerprint uint64
	// MaxBytes bounds the total size of the files the store knows (see
	// the package documentation). It must be positive. A unit whose file
	// alone exceeds it is removed right after it is written.
	MaxBytes int64
	// Sync makes Put flush every file, then its directory, to stable
	// storage before it returns. Without it a crash of the machine (not
	// of the process) may lose recent files, which Get then reports as
	// missing or corrupt.
	Sync bool
}

// Store is a tierstore.Store over a local directory (see the package
// documentation). It is safe for concurrent use.
type Store struct {
	dir      string // Options.Dir, cleaned
	root     string // dir/<fingerprint>
	fp       uint64
	maxBytes int64
	sync     bool

	closed atomic.Bool
	bufs   sync.Pool // of *[]byte: encoded values

	mu    sync.Mutex
	lru   list.List                // of *entry, most recently used first
	index map[string]*list.Element // by path
	bytes int64                    // sum of the entries' sizes
}

var _ tierstore.Store = (*Store)(nil)

// entry is a unit file the store knows.
type entry struct {
	path string
	size int64
}

// staleTemp is the age after which Open removes a temporary file: a Put
// that crashed left it.
const staleTemp = time.Minute

// Open returns a Store over opts.Dir, creating the directory if it is
// missing. It indexes the unit files of opts.Fingerprint found there,
// oldest modification time first, removes those that exceed MaxBytes, and
// removes temporary files left by a Put that crashed more than a minute
// ago; other files are left alone and ignored.
//
// It returns an error wrapping tierstore.ErrInvalidConfig for an empty Dir
// or a MaxBytes that is not positive, and tierstore.ErrUnavailable when
// the directory cannot be created or read.
func Open(opts Options) (*Store, error) {
	if opts.Dir == "" {
		return nil, fmt.Errorf("diskstore: %w: empty Dir", tierstore.ErrInvalidConfig)
	}
	if opts.MaxBytes <= 0 {
		return nil, fmt.Errorf("diskstore: %w: MaxBytes %d, want more than 0", tierstore.ErrInvalidConfig, opts.MaxBytes)
	}
	dir := filepath.Clean(opts.Dir)
	// The first element of every name is the fingerprint's.
	fpName, _, _ := strings.Cut(tierstore.Name(opts.Fingerprint, kvcache.UnitKey{}, '/'), "/")
	s := &Store{
		dir:      dir,
		root:     filepath.Join(dir, fpName),
		fp:       opts.Fingerprint,
		maxBytes: opts.MaxBytes,
		sync:     opts.Sync,
		index:    make(map[string]*list.Element),
	}
	s.bufs.New = func() any { return new([]byte) }
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, unavailable(err)
	}
	if err := s.load(time.Now()); err != nil {
		return nil, err
	}
	return s, nil
}

// found is a unit file Open found.
type found struct {
	path string
	size int64
	mod  time.Time
}

// load indexes the unit files under s.root, oldest first, and trims the
// index to the bound.
func (s *Store) load(now time.Time) error {
	var files []found
	err := filepath.WalkDir(s.root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // no files yet, or another process removed one
			}
			return err
		}
		depth := 0
		if rel, err := filepath.Rel(s.root, path); err == nil && rel != "." {
			depth = strings.Count(rel, string(filepath.Separator)) + 1
		}
		name := d.Name()
		if d.IsDir() {
			if depth > 2 || depth > 0 && !validKeyElem(name) {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		switch {
		case strings.HasSuffix(name, ".tmp"):
			if now.Sub(info.ModTime()) > staleTemp {
				if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return err
				}
			}
		case depth == 3 && validUnitName(name):
			files = append(files, found{path: path, size: info.Size(), mod: info.ModTime()})
		}
		return nil
	})
	if err != nil {
		return unavailable(err)
	}
	// WalkDir visits in lexical order; the stable sort keeps it for equal
	// times.
	slices.SortStableFunc(files, func(a, b found) int { return a.mod.Compare(b.mod) })
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range files {
		s.index[f.path] = s.lru.PushFront(&entry{path: f.path, size: f.size})
		s.bytes += f.size
	}
	return s.trim()
}

// validKeyElem reports whether name is a namespace or LoRA element of a
// name: "-", hexadecimal digits, or 'h' and a hash of 16 (a long one).
func validKeyElem(name string) bool {
	if len(name) == 17 && name[0] == 'h' {
		return isHex(name[1:])
	}
	return name == "-" || name != "" && len(name)%2 == 0 && isHex(name)
}

// validUnitName reports whether name is the last element of a name: a
// block hash of 16 hexadecimal digits, "-" and a slice.
func validUnitName(name string) bool {
	hash, slice, ok := strings.Cut(name, "-")
	if !ok || len(hash) != 16 || !isHex(hash) || slice == "" {
		return false
	}
	for _, c := range []byte(slice) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func isHex(s string) bool {
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Path returns the path of the file that holds unit k.
func (s *Store) Path(k kvcache.UnitKey) string {
	return filepath.Join(s.dir, tierstore.Name(s.fp, k, '/'))
}

// Put stores values[i] as unit keys[i] (see tierstore.Store), writing each
// file under a temporary name and renaming it into place, then removes
// the least recently used files while the files the store knows exceed
// MaxBytes. It checks ctx before each unit; the units stored before an
// error stay stored.
//
// It returns an error wrapping tierstore.ErrUnavailable, naming the path,
// when a file cannot be written or an old one removed, or when ctx is
// done; tierstore.ErrClosed after Close; kvcache.ErrInvalidCopy when keys
// and values differ in length.
func (s *Store) Put(ctx context.Context, keys []kvcache.UnitKey, values [][]byte) error {
	if len(values) != len(keys) {
		return fmt.Errorf("diskstore: %w: Put of %d values under %d keys", kvcache.ErrInvalidCopy, len(values), len(keys))
	}
	var dirs []string // to flush, with Sync
	for i, k := range keys {
		if err := s.check(ctx); err != nil {
			return err
		}
		path := s.Path(k)
		created, err := s.write(path, k, values[i])
		if err != nil {
			return err
		}
		if !s.sync {
			continue
		}
		// Flush the file's directory, and the directories above it up
		// to Dir when this Put created it.
		for d := filepath.Dir(path); !slices.Contains(dirs, d); d = filepath.Dir(d) {
			dirs = append(dirs, d)
			if !created || d == s.dir || len(d) <= len(s.dir) {
				break
			}
		}
	}
	for _, d := range dirs {
		if err := syncDir(d); err != nil {
			return unavailable(err)
		}
	}
	return nil
}

// write stores the value of unit k holding payload at path. It reports
// whether it created the directory of path.
func (s *Store) write(path string, k kvcache.UnitKey, payload []byte) (created bool, err error) {
	buf := s.bufs.Get().(*[]byte)
	defer s.bufs.Put(buf)
	*buf = tierstore.Encode((*buf)[:0], s.fp, k, payload)

	dir, base := filepath.Split(path)
	f, err := os.CreateTemp(dir, base+".*.tmp")
	if errors.Is(err, fs.ErrNotExist) {
		created = true
		if err = os.MkdirAll(dir, 0o700); err == nil {
			f, err = os.CreateTemp(dir, base+".*.tmp")
		}
	}
	if err != nil {
		return created, unavailable(err)
	}
	tmp := f.Name()
	_, err = f.Write(*buf)
	if err == nil && s.sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(tmp)
		return created, unavailable(err)
	}
	return created, s.install(tmp, path, int64(len(*buf)))
}

// install renames tmp onto path and makes it the most recently used file,
// then trims the index. The rename happens under s.mu, so that trim and
// discard, which remove files under it too, never remove a file the index
// does not account for.
func (s *Store) install(tmp, path string, size int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return unavailable(err)
	}
	s.add(path, size)
	return s.trim()
}

// add makes path, of size bytes, the most recently used file (s.mu held).
func (s *Store) add(path string, size int64) {
	if el, ok := s.index[path]; ok {
		e := el.Value.(*entry)
		s.bytes += size - e.size
		e.size = size
		s.lru.MoveToFront(el)
		return
	}
	s.index[path] = s.lru.PushFront(&entry{path: path, size: size})
	s.bytes += size
}

// trim removes the least recently used files while the index exceeds the
// bound (s.mu held). A file already gone is fine: another process removed
// it. The index forgets every file it tried to remove; it returns the
// first error other than a missing file.
func (s *Store) trim() error {
	var first error
	for s.bytes > s.maxBytes && s.lru.Len() > 0 {
		e := s.remove(s.lru.Back())
		if err := os.Remove(e.path); err != nil && !errors.Is(err, fs.ErrNotExist) && first == nil {
			first = unavailable(err)
		}
	}
	return first
}

// remove drops el from the index (s.mu held) and returns its entry.
func (s *Store) remove(el *list.Element) *entry {
	e := s.lru.Remove(el).(*entry)
	delete(s.index, e.path)
	s.bytes -= e.size
	return e
}

// Get reads unit keys[i] into dst[i] (see tierstore.Store), checking it
// with tierstore.Decode, and makes its file the most recently used. It
// checks ctx before each unit. A unit missing or corrupt fails alone (the
// error is then a kvcache.CopyErrors, one element per key, when keys holds
// several); any other error stops the call. A file found corrupt is
// removed.
//
// It returns an error wrapping kvcache.ErrUnitMissing when a unit has no
// file, kvcache.ErrUnitCorrupt when its file fails the check (another
// unit's, damaged, truncated, or of another size), tierstore.ErrUnavailable
// when a file cannot be read or ctx is done, tierstore.ErrClosed after
// Close, and kvcache.ErrInvalidCopy when keys and dst differ in length;
// each names the path.
func (s *Store) Get(ctx context.Context, keys []kvcache.UnitKey, dst [][]byte) error {
	if len(dst) != len(keys) {
		return fmt.Errorf("diskstore: %w: Get of %d keys into %d buffers", kvcache.ErrInvalidCopy, len(keys), len(dst))
	}
	buf := s.bufs.Get().(*[]byte)
	defer s.bufs.Put(buf)
	var errs kvcache.CopyErrors
	for i, k := range keys {
		if err := s.check(ctx); err != nil {
			return err
		}
		if err := s.read(s.Path(k), k, dst[i], buf); err != nil {
			if errors.Is(err, tierstore.ErrUnavailable) {
				return err
			}
			errs = errs.Set(i, len(keys), err)
		}
	}
	return errs.Err()
}

// read reads the file of unit k at path into dst, using buf.
func (s *Store) read(path string, k kvcache.UnitKey, dst []byte, buf *[]byte) error {
	want := int64(tierstore.HeaderSize(k) + len(dst) + 8)
	info, whole, err := readFile(path, want, buf)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		s.forget(path)
		return fmt.Errorf("diskstore: %w: %w", kvcache.ErrUnitMissing, err)
	case err != nil:
		return unavailable(err)
	case !info.Mode().IsRegular():
		return fmt.Errorf("diskstore: %w: %s is not a regular file", kvcache.ErrUnitMissing, path)
	case !whole:
		s.discard(path, info)
		return fmt.Errorf("diskstore: %w: %s (removed): file of %d bytes, want %d", kvcache.ErrUnitCorrupt, path, info.Size(), want)
	}
	if err := tierstore.Decode(*buf, s.fp, k, dst); err != nil {
		s.discard(path, info)
		return fmt.Errorf("diskstore: %s (removed): %w", path, err)
	}
	s.touch(path, want)
	return nil
}

// readFile reads the file at path into *buf when it is a regular file of
// want bytes. It returns the file's information (nil when it cannot be
// opened) and whether it read want bytes; a file that is shorter or
// longer is not an error.
func readFile(path string, want int64, buf *[]byte) (info os.FileInfo, whole bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	if info, err = f.Stat(); err != nil || !info.Mode().IsRegular() || info.Size() != want {
		return info, false, err
	}
	b := slices.Grow((*buf)[:0], int(want))[:want]
	*buf = b
	if _, err := io.ReadFull(f, b); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return info, false, nil // truncated while read
		}
		return info, false, err
	}
	return info, true, nil
}

// touch makes path, of size bytes, the most recently used file after a
// read; a file another process wrote enters the index.
func (s *Store) touch(path string, size int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.add(path, size)
	// The read succeeded: a file the bound cannot remove is left to the
	// next Put to report.
	_ = s.trim()
}

// forget drops path from the index after a read found no file, unless a
// Put of this store has renamed one into place since.
func (s *Store) forget(path string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.index[path]
	if !ok {
		return
	}
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		s.remove(el)
	}
}

// discard removes the corrupt file read (info) at path and drops it from
// the index, unless the path names another file by now (a Put renamed a
// new one into place since the read).
func (s *Store) discard(path string, read os.FileInfo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now, err := os.Lstat(path); err == nil && os.SameFile(now, read) {
		_ = os.Remove(path) // gone already is fine; an error leaves it to be found again
	} else if err == nil {
		return
	}
	if el, ok := s.index[path]; ok {
		s.remove(el)
	}
}

// Contains reports which of keys have a file (see tierstore.Store),
// without reading them: a file another process wrote counts, and a later
// Get may still miss or find the file corrupt. It checks ctx before each
// key.
//
// It returns an error wrapping tierstore.ErrUnavailable when a path
// cannot be examined or ctx is done, and tierstore.ErrClosed after Close.
func (s *Store) Contains(ctx context.Context, keys []kvcache.UnitKey) ([]bool, error) {
	out := make([]bool, len(keys))
	for i, k := range keys {
		if err := s.check(ctx); err != nil {
			return nil, err
		}
		info, err := os.Stat(s.Path(k))
		switch {
		case err == nil:
			out[i] = info.Mode().IsRegular()
		case errors.Is(err, fs.ErrNotExist):
		default:
			return nil, unavailable(err)
		}
	}
	return out, nil
}

// Usage returns how many unit files the store knows and their total
// size in bytes, which is at most Options.MaxBytes.
func (s *Store) Usage() (files int, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lru.Len(), s.bytes
}

// Close marks the store closed: later calls of Put, Get and Contains
// return an error wrapping tierstore.ErrClosed, while calls already
// running finish. The files stay, for the next Open. Close always returns
// nil; calling it again does nothing.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}

// check returns the error of a call that must not go on: the store is
// closed or ctx is done.
func (s *Store) check(ctx context.Context) error {
	if s.closed.Load() {
		return fmt.Errorf("diskstore: %w: %s", tierstore.ErrClosed, s.root)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("diskstore: %w: %w", tierstore.ErrUnavailable, err)
	}
	return nil
}

// unavailable wraps err, a file operation's error (which names the path),
// in tierstore.ErrUnavailable.
func unavailable(err error) error {
	return fmt.Errorf("diskstore: %w: %w", tierstore.ErrUnavailable, err)
}

// syncDir flushes directory dir, which makes the renames into it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
