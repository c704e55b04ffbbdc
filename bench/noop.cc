// Does nothing: exec'ing it measures the fixed cost of starting a static
// binary the way a runtime starts a plugin (fork, setns, execve, wait).
int main() { return 0; }
