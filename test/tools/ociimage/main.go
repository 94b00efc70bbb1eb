// Command ociimage writes an OCI image archive (the "oci-layout" tar that
// `ctr images import` reads) holding one uncompressed layer made from a root
// file system folder, and an image config with the given entrypoint, user,
// environment and working directory. The image is named by the
// io.containerd.image.name annotation, so containerd imports it under exactly
// that name (for example registry.k8s.io/pause:3.10.2) and a pod naming that
// image with imagePullPolicy IfNotPresent starts from it without a registry.
//
// File owners, modes, symlinks and hard links are taken from the folder as
// they are (build the folder as root). Modification times are zeroed so the
// same folder gives the same layer digest.
//
//	ociimage -name NAME -rootfs DIR -out FILE.tar [-entrypoint JSON] [-cmd JSON]
//	         [-user UID[:GID]] [-env K=V]... [-workdir DIR]
package main

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"
)

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *platform         `json:"platform,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

type imageConfig struct {
	User       string   `json:"User,omitempty"`
	Env        []string `json:"Env,omitempty"`
	Entrypoint []string `json:"Entrypoint,omitempty"`
	Cmd        []string `json:"Cmd,omitempty"`
	WorkingDir string   `json:"WorkingDir,omitempty"`
}

type image struct {
	Created      time.Time   `json:"created"`
	Architecture string      `json:"architecture"`
	OS           string      `json:"os"`
	Config       imageConfig `json:"config"`
	RootFS       struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

func main() {
	var (
		name, rootfs, out, entrypoint, cmd, user, workdir string
		env                                               multiFlag
	)
	flag.StringVar(&name, "name", "", "image name, as pods name it")
	flag.StringVar(&rootfs, "rootfs", "", "root file system folder")
	flag.StringVar(&out, "out", "", "archive to write")
	flag.StringVar(&entrypoint, "entrypoint", "", "entrypoint, a JSON array")
	flag.StringVar(&cmd, "cmd", "", "command, a JSON array")
	flag.StringVar(&user, "user", "", "user (uid or uid:gid)")
	flag.StringVar(&workdir, "workdir", "", "working directory")
	flag.Var(&env, "env", "K=V environment variable (repeatable)")
	flag.Parse()
	if name == "" || rootfs == "" || out == "" {
		fmt.Fprintln(os.Stderr, "ociimage: -name, -rootfs and -out are required")
		os.Exit(2)
	}
	cfg := imageConfig{User: user, Env: env, WorkingDir: workdir}
	for _, a := range []struct {
		flag string
		into *[]string
	}{{entrypoint, &cfg.Entrypoint}, {cmd, &cfg.Cmd}} {
		if a.flag == "" {
			continue
		}
		if err := json.Unmarshal([]byte(a.flag), a.into); err != nil {
			fmt.Fprintf(os.Stderr, "ociimage: %q is not a JSON array of strings: %v\n", a.flag, err)
			os.Exit(2)
		}
	}
	if err := write(name, rootfs, out, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

// write builds the archive next to out and renames it into place, so a
// failed run never leaves a half-written archive under the final name.
func write(name, rootfs, out string, cfg imageConfig) (err error) {
	dir, err := os.MkdirTemp(filepath.Dir(out), ".ociimage-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	blobs := filepath.Join(dir, "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return err
	}

	layer, err := writeLayer(rootfs, blobs)
	if err != nil {
		return fmt.Errorf("layer from %s: %w", rootfs, err)
	}
	img := image{Architecture: runtime.GOARCH, OS: "linux", Config: cfg}
	img.RootFS.Type = "layers"
	img.RootFS.DiffIDs = []string{layer.Digest}
	config, err := writeJSON(blobs, "application/vnd.oci.image.config.v1+json", img)
	if err != nil {
		return err
	}
	manifest, err := writeJSON(blobs, "application/vnd.oci.image.manifest.v1+json", map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        config,
		"layers":        []descriptor{layer},
	})
	if err != nil {
		return err
	}
	manifest.Platform = &platform{Architecture: runtime.GOARCH, OS: "linux"}
	manifest.Annotations = map[string]string{
		"io.containerd.image.name":          name,
		"org.opencontainers.image.ref.name": refName(name),
	}
	index := map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests":     []descriptor{manifest},
	}
	if err := writeFile(filepath.Join(dir, "index.json"), index); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, "oci-layout"), map[string]string{"imageLayoutVersion": "1.0.0"}); err != nil {
		return err
	}

	tmp := out + ".tmp"
	if err := tarFolder(dir, tmp, false); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

// refName is the tag of an image name (the part after the last colon that
// follows the last slash), or "latest".
func refName(name string) string {
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		return name[i+1:]
	}
	return "latest"
}

func writeFile(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

func writeJSON(blobs, mediaType string, v any) (descriptor, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return descriptor{}, err
	}
	sum := sha256.Sum256(b)
	d := descriptor{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(b))}
	return d, os.WriteFile(filepath.Join(blobs, hex.EncodeToString(sum[:])), b, 0o644)
}

// writeLayer tars rootfs into a blob named by its digest. The layer is not
// compressed, so its digest is also its diff ID.
func writeLayer(rootfs, blobs string) (descriptor, error) {
	tmp := filepath.Join(blobs, "layer.tmp")
	if err := tarFolder(rootfs, tmp, true); err != nil {
		return descriptor{}, err
	}
	f, err := os.Open(tmp)
	if err != nil {
		return descriptor{}, err
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	_ = f.Close()
	if err != nil {
		return descriptor{}, err
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if err := os.Rename(tmp, filepath.Join(blobs, sum)); err != nil {
		return descriptor{}, err
	}
	return descriptor{MediaType: "application/vnd.oci.image.layer.v1.tar", Digest: "sha256:" + sum, Size: n}, nil
}

// tarFolder writes the folder's contents (not the folder itself) to a tar
// file in lexical order. With owners, file owners and hard links are kept
// (a layer); without, everything is owned by root (the archive around it).
func tarFolder(dir, out string, owners bool) (err error) {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	tw := tar.NewWriter(f)
	links := map[[2]uint64]string{}
	var paths []string
	err = filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(paths)
	for _, p := range paths {
		if err := addEntry(tw, dir, p, owners, links); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	return tw.Close()
}

func addEntry(tw *tar.Writer, dir, p string, owners bool, links map[[2]uint64]string) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(dir, p)
	if err != nil {
		return err
	}
	var target string
	if fi.Mode()&fs.ModeSymlink != 0 {
		if target, err = os.Readlink(p); err != nil {
			return err
		}
	}
	hdr, err := tar.FileInfoHeader(fi, target)
	if err != nil {
		return err
	}
	hdr.Name = filepath.ToSlash(rel)
	if fi.IsDir() {
		hdr.Name += "/"
	}
	hdr.ModTime, hdr.AccessTime, hdr.ChangeTime = time.Unix(0, 0), time.Time{}, time.Time{}
	hdr.Uname, hdr.Gname = "", ""
	hdr.Format = tar.FormatPAX
	st, ok := fi.Sys().(*syscall.Stat_t)
	if owners && ok {
		hdr.Uid, hdr.Gid = int(st.Uid), int(st.Gid)
		if fi.Mode().IsRegular() && st.Nlink > 1 {
			key := [2]uint64{st.Dev, st.Ino}
			if first, seen := links[key]; seen {
				hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
				return tw.WriteHeader(hdr)
			}
			links[key] = hdr.Name
		}
	} else {
		hdr.Uid, hdr.Gid = 0, 0
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return nil
	}
	return copyFile(tw, p)
}

func copyFile(w io.Writer, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	_, err = io.Copy(w, f)
	return err
}
