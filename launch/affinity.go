package launch

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/dibs-gpu/dibs/nodeprobe"
)

// A session's CPU affinity is set inside the session, by its command: the
// pane is forked by the user's own tmux server, which the agent does not
// start and whose affinity it does not own. So Start runs the command under
// the dibs binary's hidden `_cpus` (Options.CPUHelper), which binds itself
// to the session's cores and execs the command: the pane's pid is the
// command's, and everything it starts inherits the binding.

// Variables the `_cpus` helper reads and sets.
const (
	// EnvCPUs is the session's (or one local rank's) cores, as a Linux CPU
	// list: what `docker run --cpuset-cpus "$DIBS_CPUS"` passes on, since a
	// container's processes do not inherit the session's affinity.
	EnvCPUs = "DIBS_CPUS"
	// EnvGPUCPUs holds each GPU's cores of the lease, in the lease's GPU
	// order, joined by ';': `_cpus rank` gives local rank i the i-th.
	EnvGPUCPUs = "DIBS_GPU_CPUS"
	// EnvCPUsPerGPU is set when the holder asked for N cores per GPU
	// (--cpus-per-gpu): `_cpus rank` then sets OMP_NUM_THREADS to the
	// rank's count.
	EnvCPUsPerGPU = "DIBS_CPUS_PER_GPU"
	// EnvCPUHelper is the `_cpus` helper's own executable, which it
	// exports, so a launcher inside the session (dibs's one process per
	// GPU) can bind each copy it starts: `"$DIBS_CPU_HELPER" _cpus rank CMD`.
	EnvCPUHelper = "DIBS_CPU_HELPER"
)

// cpuCommand wraps cmd (Spec.Command's form: none for the login shell, one
// for a shell command line, more for an argv) so it runs bound to cpus.
// Without a helper configured it is cmd as it was.
func (l *Launcher) cpuCommand(cpus string, cmd []string) []string {
	if cpus == "" || len(l.cpuHelper) == 0 {
		return cmd
	}
	return slices.Concat(l.cpuHelper, []string{cpus}, cmd)
}

// CPUMain is the hidden `_cpus` command both binaries carry, what a
// session's command runs under (see cpuCommand):
//
//	_cpus LIST [COMMAND...]   bind to LIST, then run COMMAND
//	_cpus rank COMMAND...     bind to this local rank's GPU's cores
//
// COMMAND is what tmux would run: nothing for the login shell ($SHELL), one
// word for a shell command line ($SHELL -c), more for an argv. Cores the
// machine lacks (a topology from a simulator, a CPU taken offline) are
// skipped with a line on w; with none left, or a kernel that refuses, the
// command runs unbound and a line says so: dibs is advisory, and a job
// must never fail for its binding. With `rank`, LIST is field LOCAL_RANK of
// DIBS_GPU_CPUS, DIBS_CPUS becomes it and, under --cpus-per-gpu,
// OMP_NUM_THREADS its count. It returns only when it cannot run COMMAND.
func CPUMain(args []string, w io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: _cpus LIST [COMMAND...] | _cpus rank COMMAND...")
	}
	// sched_setaffinity binds the calling thread, and execve keeps the
	// calling thread's binding: both must run on one thread, which a
	// goroutine is not otherwise held to (seen under load: the command ran
	// on every core).
	runtime.LockOSThread()
	env := os.Environ()
	list, cmd := args[0], args[1:]
	if list == "rank" {
		list = rankCPUs(env)
		if list != "" {
			env = setEnv(env, EnvCPUs, list)
			if os.Getenv(EnvCPUsPerGPU) != "" {
				if c, err := nodeprobe.ParseCPUList(list); err == nil && len(c) > 0 {
					env = setEnv(env, "OMP_NUM_THREADS", strconv.Itoa(len(c)))
				}
			}
		}
	}
	if list != "" {
		bindCPUs(list, w)
	}
	if exe, err := os.Executable(); err == nil {
		env = setEnv(env, EnvCPUHelper, exe)
	}
	path, argv, err := tmuxArgv(cmd, env)
	if err != nil {
		return err
	}
	if err := syscall.Exec(path, argv, env); err != nil {
		return fmt.Errorf("run %s: %w", argv[0], err)
	}
	return nil
}

// rankCPUs is this local rank's field of DIBS_GPU_CPUS, "" when there is
// none (no list, no LOCAL_RANK, fewer GPUs than ranks).
func rankCPUs(env []string) string {
	var gpus, rank string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, EnvGPUCPUs+"="); ok {
			gpus = v
		} else if v, ok := strings.CutPrefix(kv, "LOCAL_RANK="); ok {
			rank = v
		}
	}
	i, err := strconv.Atoi(rank)
	fields := strings.Split(gpus, ";")
	if gpus == "" || err != nil || i < 0 || i >= len(fields) {
		return ""
	}
	return fields[i]
}

// bindCPUs sets this process's affinity to the cores of list the machine
// has, saying on w what it could not do.
func bindCPUs(list string, w io.Writer) {
	want, err := nodeprobe.ParseCPUList(list)
	if err != nil {
		fmt.Fprintf(w, "dibs: not binding to CPUs: %v\n", err)
		return
	}
	online := onlineCPUs()
	var set unix.CPUSet
	var have, lack []int
	for _, c := range want {
		if c < 1024 && (online == nil || slices.Contains(online, c)) {
			set.Set(c)
			have = append(have, c)
		} else {
			lack = append(lack, c)
		}
	}
	if len(have) == 0 {
		fmt.Fprintf(w, "dibs: CPUs %s are not on this machine: running on any CPU\n", list)
		return
	}
	if len(lack) > 0 {
		fmt.Fprintf(w, "dibs: CPUs %s are not on this machine: running on %s\n", nodeprobe.FormatCPUList(lack), nodeprobe.FormatCPUList(have))
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		fmt.Fprintf(w, "dibs: cannot bind to CPUs %s (%v): running on any CPU\n", nodeprobe.FormatCPUList(have), err)
	}
}

// onlineCPUs is the machine's online CPUs from sysfs; nil when sysfs does
// not say (then every core asked for is tried, and the kernel keeps those
// it has).
func onlineCPUs() []int {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return nil
	}
	c, err := nodeprobe.ParseCPUList(string(b))
	if err != nil || len(c) == 0 {
		return nil
	}
	return c
}

// tmuxArgv is how tmux runs a session's command: none is the login shell
// (argv[0] "-" and its name, as login(1) does), one word is a command line
// for $SHELL -c, more an argv looked up in the session's PATH.
func tmuxArgv(cmd, env []string) (string, []string, error) {
	shell := "/bin/sh"
	path := DefaultPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "SHELL="); ok && filepath.IsAbs(v) {
			shell = v
		} else if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	switch len(cmd) {
	case 0:
		return shell, []string{"-" + filepath.Base(shell)}, nil
	case 1:
		return shell, []string{shell, "-c", cmd[0]}, nil
	}
	name := cmd[0]
	if !strings.Contains(name, "/") {
		found := ""
		for dir := range strings.SplitSeq(path, ":") {
			if dir == "" {
				dir = "."
			}
			p := filepath.Join(dir, name)
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
				found = p
				break
			}
		}
		if found == "" {
			return "", nil, fmt.Errorf("%s: %w", name, exec.ErrNotFound)
		}
		name = found
	}
	return name, cmd, nil
}

// setEnv sets k=v in env, replacing an earlier k.
func setEnv(env []string, k, v string) []string {
	out := slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, k+"=") })
	return append(out, k+"="+v)
}
