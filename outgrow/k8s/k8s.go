// Package k8s writes the way out of dibs for a service: the Kubernetes
// Deployment and Service (YAML for `kubectl apply -f -`) a team applies
// when it moves a `dibs serve` service to Kubernetes, the seed's advice
// once services outgrow dibs. It is pure text, as outgrow/slurm is: the
// caller gathers the service from the board and prints the manifest.
// The text is written by hand, every value a JSON-quoted string (YAML
// reads JSON's strings), so the binary links no YAML library and no
// Kubernetes types; a test decodes it strictly into k8s.io/api's own.
package k8s

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/base/termsafe"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/service"
)

// Service is a dibs service as the export needs it.
type Service struct {
	// Name is the service's dibs name; Owner the person who runs it.
	Name, Owner string
	// Lease and Node say where it runs now, for the header.
	Lease, Node string
	// Replicas is how many replicas run (at least 1).
	Replicas int
	// Command is the argv dibs runs: one element is a shell command line,
	// more an argv executed directly (launch.Spec.Command).
	Command []string
	// Dir is the working directory on the dibs node.
	Dir string
	// Env is the environment carried from the owner's shell.
	Env map[string]string
	// GPUs is how many whole GPUs each replica holds (0 with a MIG
	// instance or a memory budget, or for -g 0).
	GPUs int
	// MIG is the profile (1g.10gb) of the MIG instance each replica holds;
	// MIGUnknown a MIG instance whose profile dibs no longer knows.
	MIG        string
	MIGUnknown bool
	// MemMiB is the memory budget on a shared GPU.
	MemMiB uint64
	// Port, Health, HealthCmd and Preemptible are the service's definition.
	Port        int
	Health      string
	HealthCmd   string
	Preemptible bool
	// Pools are the pools it was kept to, or its node's pools.
	Pools []string
	// CPUs are the cores each GPU's replica was bound to (--cpus-per-gpu),
	// one Linux CPU list per GPU, on the dibs node.
	CPUs []string
}

// Image is the placeholder written where the container image goes: dibs
// runs a bare process, Kubernetes a container, and only the team knows
// which image holds the command. A pod applied with it fails with
// InvalidImageName, saying so, rather than pulling some other image.
const Image = "FILL-IN-AN-IMAGE-WITH-THE-COMMAND"

// SecretWords mark an environment variable's name as a secret's: its value
// is never written, the manifest refers to a Secret for it.
var SecretWords = []string{"TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL"}

// Manifest is the export: the YAML, and the lines the person must read
// (what to fill in or create before it runs), for the command's stderr.
type Manifest struct {
	YAML  string
	Notes []string
}

// The health checks' numbers, as dibs's supervisor uses them
// (service.DefaultRules): a check every 2 s (dibs checks twice a second;
// the kubelet's probes are coarser), 3 failures in a row restart, 5 s per
// check, and the start-up allowance for a model to load.
const (
	probePeriod  = 2
	probeTimeout = 5
)

// Name is the Kubernetes name of a dibs service: a Service's name must be
// a DNS-1035 label (lowercase letters, digits and '-', starting with a
// letter, ending with a letter or digit), which a dibs name (letters,
// digits, '-' and '_', starting with a letter) becomes by lowercasing it,
// '_' turned to '-' and trailing '-' dropped.
func Name(dibsName string) string {
	n := strings.ToLower(strings.ReplaceAll(dibsName, "_", "-"))
	return strings.TrimRight(n, "-")
}

// Secret is the Secret the manifest refers to for name's secret variables.
func Secret(dibsName string) string { return Name(dibsName) + "-env" }

// IsSecret reports whether an environment variable's name marks a secret.
func IsSecret(env string) bool {
	up := strings.ToUpper(env)
	return slices.ContainsFunc(SecretWords, func(w string) bool { return strings.Contains(up, w) })
}

// Export writes the manifest for s. It refuses a service it cannot name
// or one without a command.
func Export(s Service) (Manifest, error) {
	if err := service.CheckName(s.Name); err != nil {
		return Manifest{}, err
	}
	if len(s.Command) == 0 || s.Command[0] == "" {
		return Manifest{}, fmt.Errorf("service %s has no command to export: dibs kept none (is it yours? only its owner and admins see it)", s.Name)
	}
	if s.Port < 0 || s.Port > 65535 {
		return Manifest{}, fmt.Errorf("service %s: port %d is out of range", s.Name, s.Port)
	}
	if s.Replicas < 1 {
		s.Replicas = 1
	}
	name := Name(s.Name)
	rules := service.DefaultRules()
	var m Manifest
	w := &writer{}
	who := "a service"
	if s.Owner != "" {
		who = termsafe.OneLine(s.Owner) + "'s service"
	}
	w.c(0, "Written by `dibs export k8s %s` from %s %s (lease %s on %s).", termsafe.OneLine(s.Name), who, termsafe.OneLine(s.Name), termsafe.OneLine(s.Lease), termsafe.OneLine(s.Node))
	w.c(0, "A Deployment of %d replica%s%s. Fill in the image below, then: kubectl apply -f FILE", s.Replicas, plural(s.Replicas), map[bool]string{true: " and a Service on its port", false: ""}[s.Port > 0])
	if name != s.Name {
		w.c(0, "Kubernetes names are lowercase with '-': %s is %s here.", termsafe.OneLine(s.Name), name)
	}
	w.c(0, "dibs restarted it in place with a growing backoff and stopped it after %d restarts in %s; Kubernetes", rules.CrashRestarts, fmtDur(rules.CrashWindow))
	w.c(0, "restarts it for ever (CrashLoopBackOff, at most 5 minutes apart) and never stops it.")
	w.l(0, "apiVersion: apps/v1")
	w.l(0, "kind: Deployment")
	w.l(0, "metadata:")
	w.l(1, "name: "+q(name))
	w.l(1, "labels:")
	w.l(2, "app.kubernetes.io/name: "+q(name))
	w.l(0, "spec:")
	w.l(1, "replicas: "+strconv.Itoa(s.Replicas))
	w.l(1, "selector:")
	w.l(2, "matchLabels:")
	w.l(3, "app.kubernetes.io/name: "+q(name))
	w.l(1, "template:")
	w.l(2, "metadata:")
	w.l(3, "labels:")
	w.l(4, "app.kubernetes.io/name: "+q(name))
	w.l(2, "spec:")
	if len(s.Pools) > 0 {
		pools := termsafe.OneLine(strings.Join(s.Pools, ", "))
		w.c(3, "dibs kept it to the pool%s %s. Label the nodes that stand for %s and keep it to them:", plural(len(s.Pools)), pools, map[bool]string{true: "it", false: "them"}[len(s.Pools) == 1])
		w.c(3, "  kubectl label node NODE dibs.pool/%s=true", labelPart(s.Pools[0]))
		w.c(3, "nodeSelector:")
		for _, p := range s.Pools {
			w.c(3, "  dibs.pool/%s: \"true\"", labelPart(p))
		}
	}
	if s.Preemptible {
		w.c(3, "dibs let quota preemption take its GPUs (--preemptible): in Kubernetes a low PriorityClass does;")
		w.c(3, "create one (kubectl create priorityclass dibs-preemptible --value=-10) and keep:")
		w.c(3, "priorityClassName: dibs-preemptible")
	}
	w.l(3, "containers:")
	w.l(4, "- name: "+q(name))
	w.c(5, "dibs ran the command as a bare process of %s on %s; Kubernetes runs it in a container.", ownerOr(s.Owner), termsafe.OneLine(s.Node))
	w.c(5, "FILL IN an image that holds the command and what it needs (its programs, libraries, model files).")
	w.l(5, "image: "+q(Image))
	m.Notes = append(m.Notes, "fill in the image: dibs runs a bare process, Kubernetes needs an image that holds the command (image: "+Image+")")
	if s.Dir != "" {
		w.c(5, "dibs ran it in %s on %s; if the image lays out the project there too, keep:", termsafe.OneLine(s.Dir), termsafe.OneLine(s.Node))
		w.c(5, "workingDir: %s", q(s.Dir))
	}
	shellLine, cmdSecrets := scrubCommand(s.Command)
	if len(s.Command) == 1 {
		w.c(5, "dibs ran this line with the owner's $SHELL -c; /bin/sh here (use bash if the image has it and the line needs it).")
	}
	w.l(5, "command:")
	w.l(6, "- "+q("/bin/sh"))
	w.l(6, "- "+q("-c"))
	w.l(6, "- "+q(shellLine))
	if len(cmdSecrets) > 0 {
		w.c(5, "The command line held secrets (%s): the line reads them from env, which takes them from a Secret.", strings.Join(slices.Sorted(maps.Keys(cmdSecrets)), ", "))
	}
	if loopback(s.Command) {
		w.c(5, "The command names 127.0.0.1 or localhost: in a container it must listen on 0.0.0.0, or")
		w.c(5, "neither the Service nor the kubelet's checks reach it.")
		m.Notes = append(m.Notes, "the command names 127.0.0.1 or localhost: in a container it must listen on 0.0.0.0")
	}
	env := maps.Clone(s.Env)
	if env == nil {
		env = map[string]string{}
	}
	for k := range cmdSecrets {
		env[k] = ""
	}
	if len(env) > 0 {
		if len(s.Env) > 0 {
			w.c(5, "The environment dibs carried from %s shell: paths on %s; change those the image lays out", ownerOr(s.Owner)+"'s", termsafe.OneLine(s.Node))
			w.c(5, "differently, and drop PATH if the image's own is right.")
		}
		w.l(5, "env:")
		var secrets []string
		for _, k := range slices.Sorted(maps.Keys(env)) {
			w.l(6, "- name: "+q(k))
			if _, ok := cmdSecrets[k]; ok || IsSecret(k) {
				secrets = append(secrets, k)
				w.c(7, "A secret: its value is not written here. It comes from the Secret %s (see below).", Secret(s.Name))
				w.l(7, "valueFrom:")
				w.l(8, "secretKeyRef:")
				w.l(9, "name: "+q(Secret(s.Name)))
				w.l(9, "key: "+q(k))
				continue
			}
			w.l(7, "value: "+q(s.Env[k]))
		}
		if len(secrets) > 0 {
			var lits []string
			for _, k := range secrets {
				lits = append(lits, "--from-literal="+k+"=...")
			}
			create := fmt.Sprintf("kubectl create secret generic %s %s", Secret(s.Name), strings.Join(lits, " "))
			w.c(5, "Create the Secret first: %s", create)
			m.Notes = append(m.Notes, "create the Secret for "+strings.Join(secrets, ", ")+" before applying: "+create)
		}
	}
	if s.Port > 0 {
		w.l(5, "ports:")
		w.l(6, "- containerPort: "+strconv.Itoa(s.Port))
		if s.Health != "" {
			w.l(7, "name: \"http\"")
		}
		w.l(7, "protocol: \"TCP\"")
	}
	if s.GPUs > 0 || s.MIG != "" || s.MIGUnknown || s.MemMiB > 0 {
		w.l(5, "resources:")
		w.l(6, "limits:")
	}
	switch {
	case s.MIG != "":
		w.c(7, "A MIG instance %s, as NVIDIA's device plugin names it with mig-strategy \"mixed\"", termsafe.OneLine(s.MIG))
		w.c(7, "(with \"single\" it is nvidia.com/gpu: 1 on a node whose GPUs are split alike).")
		w.l(7, q(MIGResource(s.MIG))+": 1")
	case s.MIGUnknown:
		w.c(7, "dibs ran it on a MIG instance whose profile it no longer knows: put the instance's")
		w.c(7, "resource (nvidia.com/mig-<profile>, device plugin mig-strategy \"mixed\") in place of a whole GPU.")
		w.l(7, q("nvidia.com/gpu")+": 1")
		m.Notes = append(m.Notes, "dibs no longer knows its MIG profile: the manifest asks for a whole GPU")
	case s.MemMiB > 0:
		w.c(7, "dibs gave it a %s memory budget on a shared GPU. Kubernetes has no GPU memory budget:", memSize(s.MemMiB))
		w.c(7, "this asks for a whole GPU. To share one, pick a MIG profile of about that size (nvidia.com/mig-...),")
		w.c(7, "or set up the device plugin's sharing (time-slicing enforces no memory limit; MPS splits")
		w.c(7, "the memory equally among its replicas). The command may read DIBS_MEM_BUDGET_MIB=%d: set it in env.", s.MemMiB)
		w.l(7, q("nvidia.com/gpu")+": 1")
		m.Notes = append(m.Notes, "Kubernetes has no GPU memory budget: the manifest asks for a whole GPU (see its comment)")
	case s.GPUs > 0:
		w.l(7, q("nvidia.com/gpu")+": "+strconv.Itoa(s.GPUs))
	default:
		w.c(5, "No GPU (dibs serve -g 0): give resources (cpu, memory) as the command needs them.")
	}
	if len(s.CPUs) > 0 {
		w.c(5, "dibs bound it to cores %s of %s, near its GPUs. In Kubernetes: integer cpu requests equal to", termsafe.OneLine(strings.Join(s.CPUs, " ")), termsafe.OneLine(s.Node))
		w.c(5, "limits (Guaranteed QoS) with the kubelet's CPU Manager policy static, and its Topology Manager")
		w.c(5, "policy single-numa-node to keep the cores beside the GPUs.")
	}
	probe := func(kind string) {
		switch {
		case s.HealthCmd != "":
			w.l(6, "exec:")
			w.l(7, "command:")
			w.l(8, "- "+q("/bin/sh"))
			w.l(8, "- "+q("-c"))
			w.l(8, "- "+q(s.HealthCmd))
		case s.Health != "":
			w.l(6, "httpGet:")
			w.l(7, "path: "+q(s.Health))
			w.l(7, "port: "+strconv.Itoa(s.Port))
		default:
			w.l(6, "tcpSocket:")
			w.l(7, "port: "+strconv.Itoa(s.Port))
		}
		w.l(6, "timeoutSeconds: "+strconv.Itoa(probeTimeout))
		if kind == "startupProbe" {
			// The start-up allowance: checks fail until the model loads.
			w.l(6, "periodSeconds: 5")
			w.l(6, "failureThreshold: "+strconv.Itoa(max(int(rules.StartAllowance/(5*time.Second)), 1)))
			return
		}
		w.l(6, "periodSeconds: "+strconv.Itoa(probePeriod))
		if kind == "readinessProbe" {
			w.l(6, "failureThreshold: 1")
		} else {
			w.l(6, "failureThreshold: "+strconv.Itoa(rules.FailsInARow))
		}
	}
	if s.Port > 0 || s.HealthCmd != "" {
		what := "its port answering (TCP connect)"
		switch {
		case s.HealthCmd != "":
			what = "--health-cmd exiting 0"
		case s.Health != "":
			what = "an HTTP GET of " + termsafe.OneLine(s.Health) + " answering 2xx"
		}
		w.c(5, "dibs's health check, %s: %s to start (the start-up allowance),", what, fmtDur(rules.StartAllowance))
		w.c(5, "then restarted after %d failures in a row; traffic only while it passes.", rules.FailsInARow)
		for _, kind := range []string{"startupProbe", "readinessProbe", "livenessProbe"} {
			w.l(5, kind+":")
			probe(kind)
		}
	} else {
		w.c(5, "No port and no --health-cmd: dibs took it as healthy while its command ran, as Kubernetes does.")
	}
	if s.Port > 0 {
		w.l(-1, "---")
		w.c(0, "dibs's address was %s; in the cluster it is http://%s.NAMESPACE.svc:%d.", termsafe.OneLine(service.URL(s.Node, s.Port)), name, s.Port)
		w.c(0, "From outside: kubectl port-forward svc/%s %d, or type: NodePort / LoadBalancer, or an Ingress.", name, s.Port)
		w.l(0, "apiVersion: v1")
		w.l(0, "kind: Service")
		w.l(0, "metadata:")
		w.l(1, "name: "+q(name))
		w.l(1, "labels:")
		w.l(2, "app.kubernetes.io/name: "+q(name))
		w.l(0, "spec:")
		w.l(1, "type: \"ClusterIP\"")
		w.l(1, "selector:")
		w.l(2, "app.kubernetes.io/name: "+q(name))
		w.l(1, "ports:")
		w.l(2, "- port: "+strconv.Itoa(s.Port))
		w.l(3, "targetPort: "+strconv.Itoa(s.Port))
		w.l(3, "protocol: \"TCP\"")
		if s.Health != "" {
			w.l(3, "name: \"http\"")
		}
	}
	m.YAML = w.b.String()
	return m, nil
}

// The parts of a command line that hold a secret: a flag whose name
// marks one (--api-key VALUE, --token=VALUE) and an assignment to a
// variable whose name does (HF_TOKEN=VALUE). secretValue is a shell word
// as a person types one.
var (
	secretValue  = `(?:'[^']*'|"[^"]*"|[^\s'"&;|<>()]+)+`
	secretAssign = regexp.MustCompile(`(^|\s)([A-Za-z_][A-Za-z0-9_]*)=(` + secretValue + `)`)
	secretFlag   = regexp.MustCompile(`(^|\s)(--?[A-Za-z][A-Za-z0-9_.-]*)(=|\s+)(` + secretValue + `)`)
)

// scrubCommand is the /bin/sh line that runs argv, with every secret its
// words hold read from an environment variable instead ("$API_KEY"), and
// those variables (their values for the test alone: the manifest never
// writes them). An argv of several words is run with exec, each word
// quoted; one word is a shell line already, scrubbed in place.
func scrubCommand(argv []string) (string, map[string]string) {
	secrets := map[string]string{}
	ref := func(name, value string) string {
		v := envName(name)
		secrets[v] = value
		return `"$` + v + `"`
	}
	if len(argv) == 1 {
		line := secretAssign.ReplaceAllStringFunc(argv[0], func(m string) string {
			p := secretAssign.FindStringSubmatch(m)
			if !IsSecret(p[2]) {
				return m
			}
			return p[1] + p[2] + "=" + ref(p[2], p[3])
		})
		line = secretFlag.ReplaceAllStringFunc(line, func(m string) string {
			p := secretFlag.FindStringSubmatch(m)
			if !isSecretFlag(p[2]) || strings.HasPrefix(p[4], "-") || strings.HasPrefix(p[4], `"$`) {
				return m
			}
			return p[1] + p[2] + p[3] + ref(strings.TrimLeft(p[2], "-"), p[4])
		})
		return line, secrets
	}
	words := make([]string, len(argv))
	for i, a := range argv {
		words[i] = job.ShellWord(a)
		if i == 0 {
			continue
		}
		prev := argv[i-1]
		name, value, eq := strings.Cut(a, "=")
		switch {
		case eq && strings.HasPrefix(a, "-") && isSecretFlag(name):
			words[i] = job.ShellWord(name) + "=" + ref(strings.TrimLeft(name, "-"), value)
		case eq && !strings.HasPrefix(a, "-") && isEnvName(name) && IsSecret(name):
			words[i] = name + "=" + ref(name, value)
		case !strings.HasPrefix(a, "-") && strings.HasPrefix(prev, "-") && !strings.Contains(prev, "=") && isSecretFlag(prev):
			words[i] = ref(strings.TrimLeft(prev, "-"), a)
		}
	}
	return "exec " + strings.Join(words, " "), secrets
}

// isSecretFlag reports whether a flag (--api-key) names a secret: one of
// its words, split at '-', '_' and '.', is a SecretWords word. Words, not
// IsSecret's containment: vLLM's --max-num-batched-tokens is no secret.
func isSecretFlag(flag string) bool {
	for _, w := range strings.FieldsFunc(strings.ToUpper(flag), func(r rune) bool { return r == '-' || r == '_' || r == '.' }) {
		if slices.Contains(SecretWords, w) {
			return true
		}
	}
	return false
}

// envName is the variable a secret of a flag or variable name is read
// from: upper case, every other character '_' (--api-key is API_KEY).
func envName(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			return r
		}
		return '_'
	}, s)
}

func isEnvName(s string) bool {
	return s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_')
	}) && !(s[0] >= '0' && s[0] <= '9')
}

// MIGResource is the resource NVIDIA's device plugin offers for a MIG
// profile with mig-strategy "mixed": nvidia.com/mig-<profile>, a '+'
// (1g.10gb+me) written '.', as its internal/rm does.
func MIGResource(profile string) string {
	p := strings.ToLower(strings.TrimSpace(strings.TrimPrefix(profile, "MIG ")))
	return "nvidia.com/" + strings.ReplaceAll("mig-"+p, "+", ".")
}

// writer writes YAML lines, two spaces an indent level; l(-1) writes at
// the margin with no indent (a document separator).
type writer struct{ b strings.Builder }

func (w *writer) l(indent int, s string) {
	w.b.WriteString(strings.Repeat("  ", max(indent, 0)))
	w.b.WriteString(s)
	w.b.WriteByte('\n')
}

// c writes one comment line; its arguments are the caller's to keep on
// one line (termsafe.OneLine), so no value starts a line of YAML.
func (w *writer) c(indent int, format string, args ...any) {
	w.l(indent, "# "+termsafe.OneLine(fmt.Sprintf(format, args...)))
}

// q is s as a YAML scalar: a JSON string, which YAML reads as the same
// string whatever it holds (quotes, '#', ': ', newlines, non-ASCII).
func q(s string) string {
	b, _ := json.Marshal(s) // a string always marshals
	return string(b)
}

// labelPart is a pool's name as the name part of a label key: letters,
// digits, '-', '_' and '.', starting and ending with a letter or digit.
func labelPart(s string) string {
	out := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			return r
		}
		return '-'
	}, s)
	out = strings.Trim(out, "-_.")
	if len(out) > 63 {
		out = strings.Trim(out[:63], "-_.")
	}
	if out == "" {
		out = "pool"
	}
	return out
}

func ownerOr(owner string) string {
	if owner == "" {
		return "its owner"
	}
	return termsafe.OneLine(owner)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// loopback reports whether the command names the loopback address.
func loopback(argv []string) bool {
	return slices.ContainsFunc(argv, func(a string) bool {
		return strings.Contains(a, "127.0.0.1") || strings.Contains(a, "localhost")
	})
}

func fmtDur(d time.Duration) string {
	if d >= time.Minute && d%time.Minute == 0 {
		return strconv.Itoa(int(d/time.Minute)) + " minutes"
	}
	return d.String()
}

// memSize writes a memory budget as dibs reads one (--mem 10G, 512M).
func memSize(mib uint64) string {
	if mib >= 1024 && mib%1024 == 0 {
		return strconv.FormatUint(mib/1024, 10) + "G"
	}
	return strconv.FormatUint(mib, 10) + "M"
}
