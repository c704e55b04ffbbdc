/* cni_timer: a CNI plugin in front of another, for bench/k8s_startup.sh.
 * Installed as /opt/cni/bin/bench-<type>, it runs /opt/cni/bin/<type> with the
 * same arguments, environment, stdin and stdout, and appends one line per call
 * to $CNI_TIMER_LOG (default /var/log/weft-bench-cni.log):
 *   <CNI_COMMAND> <pod name> <start ns> <end ns> <exit status>
 * (CLOCK_REALTIME, so it lines up with the API's and podbench's times). One
 * write(2) with O_APPEND per line, so concurrent calls do not interleave.
 * Its own cost is a fork and an exec (~1 ms), the same for every plugin. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv) {
  (void)argc;
  char self[4096];
  snprintf(self, sizeof self, "%s", argv[0]);
  const char *base = basename(self);
  if (strncmp(base, "bench-", 6) != 0) {
    fprintf(stderr, "cni_timer: installed as %s, not bench-<type>\n", base);
    return 2;
  }
  char real[4200];
  snprintf(real, sizeof real, "/opt/cni/bin/%s", base + 6);
  const char *pod = "-";
  const char *args = getenv("CNI_ARGS");
  char podbuf[256] = "-";
  if (args) {
    const char *p = strstr(args, "K8S_POD_NAME=");
    if (p) {
      p += strlen("K8S_POD_NAME=");
      size_t n = strcspn(p, ";");
      if (n >= sizeof podbuf) n = sizeof podbuf - 1;
      memcpy(podbuf, p, n);
      podbuf[n] = 0;
      pod = podbuf;
    }
  }
  long long t0 = now_ns();
  pid_t pid = fork();
  if (pid < 0) {
    perror("cni_timer: fork");
    return 1;
  }
  if (pid == 0) {
    argv[0] = real;
    execv(real, argv);
    fprintf(stderr, "cni_timer: exec %s: %s\n", real, strerror(errno));
    _exit(127);
  }
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  long long t1 = now_ns();
  int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  const char *log = getenv("CNI_TIMER_LOG");
  int fd = open(log ? log : "/var/log/weft-bench-cni.log", O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd >= 0) {
    char line[512];
    const char *cmd = getenv("CNI_COMMAND");
    int n = snprintf(line, sizeof line, "%s %s %lld %lld %d\n", cmd ? cmd : "-", pod, t0, t1, code);
    if (n > 0) (void)!write(fd, line, (size_t)n);
    close(fd);
  }
  return code;
}
