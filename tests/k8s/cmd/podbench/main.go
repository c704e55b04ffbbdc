// Command podbench measures pod start-up through the real kubelet
// (bench/k8s_startup.sh, docs/performance.md "Pod start-up on the real
// cluster"): it creates --pods pods at once (one goroutine each, no client-side
// rate limit) pinned by nodeSelector to --node, and times, per pod, from the
// moment its create request is sent:
//
//	scheduled  the watch shows spec.nodeName        (API server and scheduler)
//	ip         the watch shows status.podIP         (kubelet, containerd's sandbox, the CNI ADD,
//	           and in practice the container's start: kubelet reports them in one status update)
//	started    the container is running
//	ready      the Ready condition is True          (kubelet's status update)
//	answered   an HTTP GET of agnhost netexec's /hostname at the pod's IP is
//	           answered (probed every --probe-every from where podbench runs:
//	           a node's network namespace reaches its own pods)
//
// It prints one JSON object: per-pod times (ms) and p50/p99 of each. The pods
// are deleted at the end (grace 0) and waited for; --keep leaves them.
// Times are of watch events as podbench receives them, so each includes the
// watch's own latency (the same for every run).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math"
	"net"
	"net/http"
	"os"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

type podTimes struct {
	Name      string  `json:"name"`
	Created   float64 `json:"created"` // ms after the create was sent: the API's answer
	Scheduled float64 `json:"scheduled"`
	IP        float64 `json:"ip"`
	Started   float64 `json:"started"`
	Ready     float64 `json:"ready"`
	Answered  float64 `json:"answered"`
	PodIP     string  `json:"podIP"`
	SentNs    int64   `json:"sent_ns"` // when the create was sent, Unix ns (to line up with cni_timer's log)
	sent      time.Time
}

func ms(t0, t time.Time) float64 { return math.Round(float64(t.Sub(t0).Microseconds())/10) / 100 }

func pct(v []float64, p float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	if i < 0 {
		i = 0
	}
	return s[i]
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig")
	node := flag.String("node", "", "the node every pod is scheduled to (nodeSelector kubernetes.io/hostname)")
	ns := flag.String("namespace", "podbench", "namespace (created when missing)")
	n := flag.Int("pods", 100, "pods created at once")
	image := flag.String("image", "registry.k8s.io/e2e-test-images/agnhost:2.63.0", "agnhost image")
	label := flag.String("label", "run", "value of the pods' podbench label (names are podbench-<label>-<i>)")
	port := flag.Int("port", 8080, "netexec's HTTP port")
	every := flag.Duration("probe-every", 5*time.Millisecond, "probe interval")
	timeout := flag.Duration("timeout", 5*time.Minute, "give up after")
	keep := flag.Bool("keep", false, "leave the pods")
	flag.Parse()
	if *node == "" || *kubeconfig == "" {
		log.Fatal("podbench: --node and --kubeconfig are required")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		log.Fatalf("podbench: %v", err)
	}
	cfg.QPS, cfg.Burst = 10000, 10000 // the burst is the point: no client-side throttle
	cfg.UserAgent = "weft-podbench"
	c := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: *ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		log.Fatalf("podbench: namespace %s: %v", *ns, err)
	}
	sel := "podbench=" + *label
	w, err := c.CoreV1().Pods(*ns).Watch(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		log.Fatalf("podbench: watch: %v", err)
	}
	lastRV := ""
	var mu sync.Mutex
	pods := map[string]*podTimes{}
	probing := map[string]bool{}
	var wg sync.WaitGroup
	zero := int64(0)
	start := make(chan struct{})
	for i := 0; i < *n; i++ {
		name := fmt.Sprintf("podbench-%s-%d", *label, i)
		pt := &podTimes{Name: name}
		pods[name] = pt
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"podbench": *label}},
			Spec: corev1.PodSpec{
				NodeSelector:                  map[string]string{"kubernetes.io/hostname": *node},
				TerminationGracePeriodSeconds: &zero,
				Containers: []corev1.Container{{
					Name: "netexec", Image: *image, ImagePullPolicy: corev1.PullNever,
					Args:  []string{"netexec", fmt.Sprintf("--http-port=%d", *port)},
					Ports: []corev1.ContainerPort{{ContainerPort: int32(*port)}},
				}},
			},
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			mu.Lock()
			pt.sent = time.Now()
			pt.SentNs = pt.sent.UnixNano()
			mu.Unlock()
			_, err := c.CoreV1().Pods(*ns).Create(ctx, pod, metav1.CreateOptions{})
			if err != nil {
				log.Printf("podbench: create %s: %v", name, err)
				return
			}
			mu.Lock()
			pt.Created = ms(pt.sent, time.Now())
			mu.Unlock()
		}()
	}
	close(start)

	probe := func(pt *podTimes, ip string) {
		hc := &http.Client{Timeout: 200 * time.Millisecond, Transport: &http.Transport{DisableKeepAlives: true}}
		url := "http://" + net.JoinHostPort(ip, fmt.Sprint(*port)) + "/hostname"
		for ctx.Err() == nil {
			if resp, err := hc.Get(url); err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					mu.Lock()
					pt.Answered = ms(pt.sent, time.Now())
					mu.Unlock()
					return
				}
			}
			time.Sleep(*every)
		}
	}
	done := func() bool {
		for _, pt := range pods {
			if pt.Ready == 0 || pt.Answered == 0 {
				return false
			}
		}
		return true
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
loop:
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok { // the API server ended the watch: resume where it was
				w, err = c.CoreV1().Pods(*ns).Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: lastRV})
				if err != nil {
					log.Printf("podbench: watch again: %v", err)
					break loop
				}
				continue
			}
			if ev.Type == watch.Error {
				log.Printf("podbench: watch error: %v", apierrors.FromObject(ev.Object))
				continue
			}
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			p := ev.Object.(*corev1.Pod)
			lastRV = p.ResourceVersion
			now := time.Now()
			mu.Lock()
			pt := pods[p.Name]
			if pt == nil || pt.sent.IsZero() {
				mu.Unlock()
				continue
			}
			if pt.Scheduled == 0 && p.Spec.NodeName != "" {
				pt.Scheduled = ms(pt.sent, now)
			}
			if pt.IP == 0 && p.Status.PodIP != "" {
				pt.IP, pt.PodIP = ms(pt.sent, now), p.Status.PodIP
			}
			for _, cs := range p.Status.ContainerStatuses {
				if pt.Started == 0 && cs.State.Running != nil {
					pt.Started = ms(pt.sent, now)
				}
			}
			for _, cond := range p.Status.Conditions {
				if pt.Ready == 0 && cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
					pt.Ready = ms(pt.sent, now)
				}
			}
			if pt.PodIP != "" && !probing[p.Name] {
				probing[p.Name] = true
				go probe(pt, pt.PodIP)
			}
			mu.Unlock()
		case <-tick.C:
			mu.Lock()
			d := done()
			mu.Unlock()
			if d {
				break loop
			}
		case <-ctx.Done():
			log.Printf("podbench: timed out after %v", *timeout)
			break loop
		}
	}
	wg.Wait()
	w.Stop()

	mu.Lock()
	var list []*podTimes
	for _, pt := range pods {
		list = append(list, pt)
	}
	mu.Unlock()
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	series := map[string][]float64{}
	missing := 0
	for _, pt := range list {
		if pt.Ready == 0 || pt.Answered == 0 {
			missing++
			continue
		}
		for k, v := range map[string]float64{"created": pt.Created, "scheduled": pt.Scheduled, "ip": pt.IP,
			"started": pt.Started, "ready": pt.Ready, "answered": pt.Answered,
			"sched_to_ip": pt.IP - pt.Scheduled, "ip_to_started": pt.Started - pt.IP,
			"started_to_ready": pt.Ready - pt.Started} {
			series[k] = append(series[k], v)
		}
	}
	summary := map[string]map[string]float64{}
	for k, v := range series {
		summary[k] = map[string]float64{"p50": pct(v, 50), "p99": pct(v, 99), "max": pct(v, 100)}
	}
	out := map[string]interface{}{"node": *node, "label": *label, "pods": *n, "incomplete": missing,
		"summary_ms": summary, "pods_ms": list}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	_ = enc.Encode(out)

	if !*keep {
		dctx, dcancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer dcancel()
		_ = c.CoreV1().Pods(*ns).DeleteCollection(dctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{LabelSelector: sel})
		for dctx.Err() == nil {
			l, err := c.CoreV1().Pods(*ns).List(dctx, metav1.ListOptions{LabelSelector: sel})
			if err == nil && len(l.Items) == 0 {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	if missing > 0 {
		os.Exit(1)
	}
}
