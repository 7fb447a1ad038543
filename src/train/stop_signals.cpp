#include "train/stop_signals.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

namespace seqpar {

namespace {

std::atomic<int> g_stop{0};
struct sigaction g_old_term, g_old_int, g_old_xfsz;

// Only async-signal-safe calls: an atomic, write(2) and _exit(2).
void say(const char* text) {
  const ssize_t n = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)n;
}

void on_stop_signal(int sig) {
  const char* name = sig == SIGINT ? "SIGINT" : "SIGTERM";
  int expected = 0;
  if (g_stop.compare_exchange_strong(expected, sig)) {
    say("seqpar: received ");
    say(name);
    say(": finishing the current step, then saving a checkpoint (with --save-dir) and exiting; send it again to exit "
        "at once without saving\n");
    return;
  }
  say("seqpar: received ");
  say(name);
  say(" again: exiting now, without saving (the last checkpoint written is intact)\n");
  ::_exit(128 + sig);
}

}  // namespace

StopSignals::StopSignals() {
  g_stop.store(0);
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGTERM, &sa, &g_old_term);
  ::sigaction(SIGINT, &sa, &g_old_int);
  struct sigaction ignore;
  std::memset(&ignore, 0, sizeof ignore);
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGXFSZ, &ignore, &g_old_xfsz);
}

StopSignals::~StopSignals() {
  ::sigaction(SIGTERM, &g_old_term, nullptr);
  ::sigaction(SIGINT, &g_old_int, nullptr);
  ::sigaction(SIGXFSZ, &g_old_xfsz, nullptr);
}

int stop_signal_pending() { return g_stop.load(); }

}  // namespace seqpar
