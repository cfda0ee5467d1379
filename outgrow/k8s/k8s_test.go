package k8s

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from %s (go test -update rewrites it):\n--- got\n%s\n--- want\n%s", name, path, got, want)
	}
}

// The services of the golden files: a vLLM endpoint with a token in its
// environment, a MIG replica pair kept to pools, a shared-GPU service
// checked by a command, a GPU-less dashboard.
func cases() map[string]Service {
	return map[string]Service{
		"vllm": {Name: "llm", Owner: "alice", Lease: "node01-42", Node: "node01", Replicas: 1,
			Command: []string{"vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--port", "8000", "--max-num-batched-tokens", "8192", "--api-key", "sk-live-1234"}, Dir: "/home/alice/llm",
			Env:  map[string]string{"PATH": "/home/alice/llm/.venv/bin:/usr/bin:/bin", "VIRTUAL_ENV": "/home/alice/llm/.venv", "HF_TOKEN": "hf_s3cr3t_value"},
			GPUs: 1, Port: 8000, Health: "/health"},
		"mig": {Name: "Embed_Svc", Owner: "bo", Lease: "node02-7", Node: "node02", Replicas: 2,
			Command: []string{"HF_TOKEN='hf abc' python3 -m http.server 9000 --bind 127.0.0.1 --token=tok-5678 # a comment: with \"quotes\""},
			MIG:     "1g.10gb+me", Port: 9000, Pools: []string{"inference", "a100"}, Preemptible: true},
		"shared": {Name: "tb-shared", Owner: "cy", Lease: "node03-3", Node: "node03",
			Command: []string{"python3", "serve.py", "it's here"}, Dir: "/home/cy/x",
			MemMiB: 10240, HealthCmd: "test -e /tmp/ready", CPUs: []string{"0-7"}},
		"nogpu": {Name: "tb", Owner: "dee", Lease: "node04-9", Node: "node04",
			Command: []string{"tensorboard", "--logdir", "runs", "--port", "6006", "--bind_all"}, Port: 6006},
	}
}

// decoded is the manifest read back through k8s.io/api's own types,
// strictly: a field Kubernetes does not know fails.
type decoded struct {
	dep *appsv1.Deployment
	svc *corev1.Service
}

func decode(t *testing.T, text string) decoded {
	t.Helper()
	var d decoded
	for i, doc := range strings.Split(text, "\n---\n") {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatalf("document %d: %v\n%s", i, err, doc)
		}
		switch tm.APIVersion + " " + tm.Kind {
		case "apps/v1 Deployment":
			d.dep = &appsv1.Deployment{}
			if err := yaml.UnmarshalStrict([]byte(doc), d.dep); err != nil {
				t.Fatalf("the Deployment does not decode strictly into appsv1.Deployment: %v\n%s", err, doc)
			}
		case "v1 Service":
			d.svc = &corev1.Service{}
			if err := yaml.UnmarshalStrict([]byte(doc), d.svc); err != nil {
				t.Fatalf("the Service does not decode strictly into corev1.Service: %v\n%s", err, doc)
			}
		default:
			t.Fatalf("document %d is %q %q, want a Deployment or a Service", i, tm.APIVersion, tm.Kind)
		}
	}
	if d.dep == nil {
		t.Fatalf("no Deployment in\n%s", text)
	}
	return d
}

func TestExportGolden(t *testing.T) {
	for name, s := range cases() {
		t.Run(name, func(t *testing.T) {
			m, err := Export(s)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, name, m.YAML)
		})
	}
}

// TestExportDecodesAsKubernetesTypes reads each manifest back into
// k8s.io/api's Deployment and Service strictly and checks every field the
// export maps from the dibs service.
func TestExportDecodesAsKubernetesTypes(t *testing.T) {
	for name, s := range cases() {
		t.Run(name, func(t *testing.T) {
			m, err := Export(s)
			if err != nil {
				t.Fatal(err)
			}
			d := decode(t, m.YAML)
			dep := d.dep
			kname := Name(s.Name)
			for _, e := range validation.IsDNS1123Subdomain(dep.Name) {
				t.Errorf("Deployment name %q: %s", dep.Name, e)
			}
			want := max(s.Replicas, 1)
			if dep.Spec.Replicas == nil || int(*dep.Spec.Replicas) != want {
				t.Errorf("replicas %v, want %d", dep.Spec.Replicas, want)
			}
			sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
			if err != nil || sel.Empty() || !sel.Matches(labels.Set(dep.Spec.Template.Labels)) {
				t.Errorf("selector %v does not match the pods' labels %v (%v)", dep.Spec.Selector, dep.Spec.Template.Labels, err)
			}
			if n := len(dep.Spec.Template.Spec.Containers); n != 1 {
				t.Fatalf("%d containers, want 1", n)
			}
			c := dep.Spec.Template.Spec.Containers[0]
			for _, e := range validation.IsDNS1123Label(c.Name) {
				t.Errorf("container name %q: %s", c.Name, e)
			}
			if c.Image != Image {
				t.Errorf("image %q, want the placeholder %q", c.Image, Image)
			}
			if !strings.Contains(m.YAML, "FILL IN") || !strings.Contains(strings.Join(m.Notes, "\n"), "fill in the image") {
				t.Errorf("no comment and note saying to fill in the image: notes %q", m.Notes)
			}
			if len(c.Command) != 3 || c.Command[0] != "/bin/sh" || c.Command[1] != "-c" {
				t.Errorf("command %q, want /bin/sh -c LINE", c.Command)
			} else if line, _ := scrubCommand(s.Command); c.Command[2] != line {
				t.Errorf("shell line %q, want %q", c.Command[2], line)
			}
			// Resources: the device plugin's names.
			limits := c.Resources.Limits
			switch {
			case s.MIG != "":
				checkLimit(t, limits, MIGResource(s.MIG), 1)
			case s.MemMiB > 0:
				checkLimit(t, limits, "nvidia.com/gpu", 1)
			case s.GPUs > 0:
				checkLimit(t, limits, "nvidia.com/gpu", int64(s.GPUs))
			default:
				if len(limits) != 0 {
					t.Errorf("a service without a GPU has limits %v", limits)
				}
			}
			for r := range limits {
				for _, e := range validation.IsQualifiedName(string(r)) {
					t.Errorf("resource name %q: %s", r, e)
				}
			}
			if s.MemMiB > 0 && !strings.Contains(m.YAML, "Kubernetes has no GPU memory budget") {
				t.Error("a memory budget without the comment that Kubernetes has none")
			}
			// Environment: secrets by reference, never by value.
			env := map[string]corev1.EnvVar{}
			for _, e := range c.Env {
				env[e.Name] = e
			}
			if _, cmdSecrets := scrubCommand(s.Command); len(env) != len(s.Env)+len(cmdSecrets) {
				t.Errorf("env %v, want the %d carried variables and %d from the command", c.Env, len(s.Env), len(cmdSecrets))
			}
			for k, v := range s.Env {
				e := env[k]
				if IsSecret(k) {
					if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != Secret(s.Name) || e.ValueFrom.SecretKeyRef.Key != k {
						t.Errorf("secret %s is %+v, want a reference to Secret %s key %s", k, e, Secret(s.Name), k)
					}
					if strings.Contains(m.YAML, v) {
						t.Errorf("the manifest holds %s's value", k)
					}
					continue
				}
				if e.Value != v {
					t.Errorf("env %s = %q, want %q", k, e.Value, v)
				}
			}
			// The secrets the cases hold, in the environment and on the
			// command line, are nowhere in the manifest.
			for _, v := range []string{"hf_s3cr3t_value", "sk-live-1234", "tok-5678", "hf abc"} {
				if strings.Contains(m.YAML, v) {
					t.Errorf("the manifest holds the secret %q", v)
				}
			}
			// Secrets in the command line: read from env, never written.
			_, cmdSecrets := scrubCommand(s.Command)
			for k, v := range cmdSecrets {
				e := env[k]
				if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Key != k || !strings.Contains(c.Command[2], `"$`+k+`"`) {
					t.Errorf("the command's secret %s is %+v in env and the line is %q", k, e, c.Command[2])
				}
				if strings.Contains(m.YAML, strings.Trim(v, "'")) {
					t.Errorf("the manifest holds the command's secret %s", k)
				}
			}
			// Port, probes and the Service.
			if s.Port == 0 {
				if len(c.Ports) != 0 || d.svc != nil {
					t.Errorf("no port, yet ports %v and a Service %v", c.Ports, d.svc)
				}
			} else {
				if len(c.Ports) != 1 || c.Ports[0].ContainerPort != int32(s.Port) {
					t.Errorf("ports %v, want containerPort %d", c.Ports, s.Port)
				}
				if d.svc == nil {
					t.Fatal("a port and no Service")
				}
				for _, e := range validation.IsDNS1035Label(d.svc.Name) {
					t.Errorf("Service name %q: %s", d.svc.Name, e)
				}
				if d.svc.Spec.Type != corev1.ServiceTypeClusterIP || len(d.svc.Spec.Ports) != 1 ||
					d.svc.Spec.Ports[0].Port != int32(s.Port) || d.svc.Spec.Ports[0].TargetPort.IntValue() != s.Port {
					t.Errorf("Service spec %+v, want ClusterIP on port %d to %d", d.svc.Spec, s.Port, s.Port)
				}
				if !labels.SelectorFromSet(d.svc.Spec.Selector).Matches(labels.Set(dep.Spec.Template.Labels)) || len(d.svc.Spec.Selector) == 0 {
					t.Errorf("Service selector %v does not pick the pods %v", d.svc.Spec.Selector, dep.Spec.Template.Labels)
				}
			}
			for what, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
				if s.Port == 0 && s.HealthCmd == "" {
					if p != nil {
						t.Errorf("%s probe %+v for a service dibs checks by its command alone", what, p)
					}
					continue
				}
				if p == nil {
					t.Fatalf("no %s probe", what)
				}
				switch {
				case s.HealthCmd != "":
					if p.Exec == nil || strings.Join(p.Exec.Command, " ") != "/bin/sh -c "+s.HealthCmd {
						t.Errorf("%s probe %+v, want exec of %q", what, p.ProbeHandler, s.HealthCmd)
					}
				case s.Health != "":
					if p.HTTPGet == nil || p.HTTPGet.Path != s.Health || p.HTTPGet.Port.IntValue() != s.Port {
						t.Errorf("%s probe %+v, want GET %s on %d", what, p.ProbeHandler, s.Health, s.Port)
					}
				default:
					if p.TCPSocket == nil || p.TCPSocket.Port.IntValue() != s.Port {
						t.Errorf("%s probe %+v, want TCP on %d", what, p.ProbeHandler, s.Port)
					}
				}
			}
			if dep.Name != kname || (d.svc != nil && d.svc.Name != kname) {
				t.Errorf("names %q, want %q", dep.Name, kname)
			}
			if len(s.Pools) > 0 && !strings.Contains(m.YAML, "# nodeSelector:") {
				t.Error("pools without the nodeSelector comment")
			}
		})
	}
}

func checkLimit(t *testing.T, limits corev1.ResourceList, name string, n int64) {
	t.Helper()
	q, ok := limits[corev1.ResourceName(name)]
	if !ok || len(limits) != 1 || q.Cmp(*resource.NewQuantity(n, resource.DecimalSI)) != 0 {
		t.Errorf("limits %v, want only %s: %d", limits, name, n)
	}
}

// TestShellLineRunsTheSameArgv runs the Deployment's command line, read
// back from the YAML, in sh: it must give the program dibs's argv word
// for word (quotes, spaces, a '$' left alone).
//
// Secrets on the command line (--api-key VALUE, --token=VALUE, an
// assignment to HF_TOKEN) are read from the environment, which the Secret
// fills: with those variables set, the program gets the same words.
func TestShellLineRunsTheSameArgv(t *testing.T) {
	for _, argv := range [][]string{
		{"printf", "%s|", "a b", "it's", "$HOME", "#no", "\"q\": v", "--max-num-batched-tokens", "8192"},
		{"printf", "%s|", "--api-key", "sk 1'2", "--hf-token=h$x", "MY_PASSWORD=p w", "--keyfile", "/k"},
		{`printf '%s|' --api-key 'sk 1' MY_SECRET="s 2" --auth-token=t3 --max-tokens 5`},
	} {
		m, err := Export(Service{Name: "x", Command: argv})
		if err != nil {
			t.Fatal(err)
		}
		c := decode(t, m.YAML).dep.Spec.Template.Spec.Containers[0]
		cmd := exec.Command(c.Command[0], c.Command[1:]...)
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		_, secrets := scrubCommand(argv)
		for _, e := range c.Env {
			if e.ValueFrom == nil {
				t.Errorf("%q: env %s is not a secret", argv, e.Name)
				continue
			}
			// What the person must put in the Secret: the value as typed
			// (a shell line's quotes are the shell's).
			v := secrets[e.Name]
			if len(argv) == 1 {
				v = strings.Trim(v, `'"`)
			}
			cmd.Env = append(cmd.Env, e.Name+"="+v)
		}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%q: %v", c.Command, err)
		}
		want := "a b|it's|$HOME|#no|\"q\": v|--max-num-batched-tokens|8192|"
		nsecrets := 0
		switch {
		case len(argv) == 1:
			want, nsecrets = "--api-key|sk 1|MY_SECRET=s 2|--auth-token=t3|--max-tokens|5|", 3
		case argv[2] == "--api-key":
			want, nsecrets = "--api-key|sk 1'2|--hf-token=h$x|MY_PASSWORD=p w|--keyfile|/k|", 3
		}
		if string(out) != want {
			t.Errorf("%q: the shell line %q printed %q, want %q", argv, c.Command[2], out, want)
		}
		if len(secrets) != nsecrets {
			t.Errorf("%q: secrets %v, want %d", argv, secrets, nsecrets)
		}
	}
}

func TestMIGResourceNames(t *testing.T) {
	for profile, want := range map[string]string{
		"1g.10gb": "nvidia.com/mig-1g.10gb", "3g.40gb": "nvidia.com/mig-3g.40gb",
		"1g.10gb+me": "nvidia.com/mig-1g.10gb.me", "MIG 2g.20gb": "nvidia.com/mig-2g.20gb",
	} {
		if got := MIGResource(profile); got != want {
			t.Errorf("MIGResource(%q) = %q, want %q", profile, got, want)
		}
	}
}

func TestExportRefuses(t *testing.T) {
	for _, tc := range []struct {
		s    Service
		want string
	}{
		{Service{Name: "llm"}, "has no command"},
		{Service{Name: "1bad", Command: []string{"x"}}, "service name"},
		{Service{Name: "llm", Command: []string{"x"}, Port: 70000}, "out of range"},
	} {
		_, err := Export(tc.s)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Export(%+v) = %v, want one line with %q", tc.s, err, tc.want)
		}
	}
}
