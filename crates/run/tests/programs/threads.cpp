// 10,000 std::threads, in batches, exercising std::mutex, std::condition_variable,
// std::shared_mutex, thread_local counters (with destructors) and errno. Prints a summary that
// must be the same under plain pthreads and under corral-run.
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <vector>

static constexpr int kThreads = 10000;
static constexpr int kBatch = 500;
static constexpr int kIncrements = 50;

static std::mutex counter_mutex;
static long long shared_counter = 0;

static std::mutex gate_mutex;
static std::condition_variable gate;
static int arrived = 0;

static std::shared_mutex table_mutex;
static std::vector<int> table(64, 0);

static std::atomic<int> destructor_runs{0};
static std::atomic<int> errno_mismatches{0};
static std::atomic<int> local_mismatches{0};
static std::atomic<int> table_mismatches{0};

struct Local {
    int count = 0;
    ~Local() { destructor_runs.fetch_add(1); }
};
thread_local Local local;
thread_local int plain_local = 7;

static void body(int id, int batch_end) {
    // Own errno: set it, let other threads run (and set theirs), check it is still ours.
    errno = id % 120 + 1;
    std::this_thread::yield();
    for (int i = 0; i < kIncrements; i++) {
        std::lock_guard<std::mutex> g(counter_mutex);
        shared_counter++;
        local.count++;
        plain_local++;
    }
    if (errno != id % 120 + 1) errno_mismatches.fetch_add(1);
    // Wait on a condition variable until the whole batch has arrived.
    {
        std::unique_lock<std::mutex> g(gate_mutex);
        arrived++;
        gate.notify_all();
        gate.wait(g, [&] { return arrived >= batch_end; });
    }
    std::this_thread::yield();
    if (local.count != kIncrements || plain_local != 7 + kIncrements) local_mismatches.fetch_add(1);
    if (id % 10 == 0) {
        std::unique_lock<std::shared_mutex> w(table_mutex);
        for (auto &v : table) v++;
    } else {
        std::shared_lock<std::shared_mutex> r(table_mutex);
        int first = table[0];
        for (auto v : table)
            if (v != first) table_mismatches.fetch_add(1);
    }
    if (errno != id % 120 + 1) errno_mismatches.fetch_add(1);
}

int main() {
    for (int start = 0; start < kThreads; start += kBatch) {
        std::vector<std::thread> batch;
        for (int id = start; id < start + kBatch; id++) batch.emplace_back(body, id, start + kBatch);
        for (auto &t : batch) t.join();
    }
    std::printf("threads %d\n", kThreads);
    std::printf("shared_counter %lld\n", shared_counter);
    std::printf("table[0] %d\n", table[0]);
    std::printf("thread_local destructors %d\n", destructor_runs.load());
    std::printf("errno mismatches %d\n", errno_mismatches.load());
    std::printf("thread_local mismatches %d\n", local_mismatches.load());
    std::printf("shared_mutex mismatches %d\n", table_mismatches.load());
    return 0;
}
