// Exercises corral.hpp from C++17. Exits nonzero if any check fails; the last line of output is
// "N passed, M failed". Built and run by tests/c_programs.rs.
#include "corral.hpp"

#include <cstdio>
#include <deque>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

int passed = 0;
int failed = 0;

struct CheckFailed {
    std::string what;
};

#define CHECK(cond)                                                                         \
    do {                                                                                    \
        if (!(cond)) throw CheckFailed{std::string(__FILE__) + ":" + std::to_string(__LINE__) + \
                                       ": check failed: " #cond};                          \
    } while (0)

template <class F>
void run_test(const char* name, F test) {
    try {
        test();
        passed++;
        std::printf("ok   %s\n", name);
    } catch (const CheckFailed& e) {
        failed++;
        std::fprintf(stderr, "  %s\n", e.what.c_str());
        std::printf("FAIL %s\n", name);
    } catch (const std::exception& e) {
        failed++;
        std::fprintf(stderr, "  unexpected exception: %s\n", e.what());
        std::printf("FAIL %s\n", name);
    }
    std::fflush(stdout);
}

void test_lock_guard_counter() {
    corral::Mutex m;
    long counter = 0;
    std::vector<corral::Thread<void>> threads;
    for (int i = 0; i < 8; i++) {
        threads.push_back(corral::spawn([&] {
            for (int j = 0; j < 5000; j++) {
                std::lock_guard<corral::Mutex> guard(m);
                long v = counter;
                if (j % 64 == 0) corral_yield();
                counter = v + 1;
            }
        }));
    }
    for (auto& t : threads) t.join();
    CHECK(counter == 8 * 5000);
    // The guards released the mutex, so it can be taken again.
    CHECK(m.try_lock());
    m.unlock();
}

void test_spawn_join_values() {
    std::vector<corral::Thread<std::string>> threads;
    for (int i = 0; i < 100; i++) {
        threads.push_back(corral::spawn([i] { return std::string(size_t(i), 'x'); }));
    }
    for (int i = 0; i < 100; i++) CHECK(threads[size_t(i)].join() == std::string(size_t(i), 'x'));

    auto t = corral::spawn([]() -> int { throw std::runtime_error("from a uthread"); });
    bool caught = false;
    try {
        t.join();
    } catch (const std::runtime_error& e) {
        caught = std::string(e.what()) == "from a uthread";
    }
    CHECK(caught);
    CHECK(!t.joinable());

    // Dropping an unjoined handle joins it.
    int ran = 0;
    { auto dropped = corral::spawn([&] { corral_sleep_us(1000); ran = 1; }); }
    CHECK(ran == 1);
}

void test_condvar_queue() {
    corral::Mutex m;
    corral::CondVar cv;
    std::deque<int> queue;
    const int n = 10000;
    auto consumer = corral::spawn([&] {
        long sum = 0;
        for (int expected = 0; expected < n; expected++) {
            std::unique_lock<corral::Mutex> lock(m);
            cv.wait(lock, [&] { return !queue.empty(); });
            if (queue.front() != expected) return -1L;
            sum += queue.front();
            queue.pop_front();
        }
        return sum;
    });
    for (int i = 0; i < n; i++) {
        {
            std::lock_guard<corral::Mutex> guard(m);
            queue.push_back(i);
        }
        cv.notify_one();
    }
    CHECK(consumer.join() == long(n) * (n - 1) / 2);

    std::unique_lock<corral::Mutex> lock(m);
    CHECK(cv.wait_for(lock, std::chrono::milliseconds(5)) == std::cv_status::timeout);
    CHECK(lock.owns_lock());
}

void test_waitgroup() {
    corral::WaitGroup wg;
    corral::Mutex m;
    int done = 0;
    std::vector<corral::Thread<void>> threads;
    wg.add(20);
    for (int i = 0; i < 20; i++) {
        threads.push_back(corral::spawn([&] {
            {
                std::lock_guard<corral::Mutex> guard(m);
                done++;
            }
            wg.done();
        }));
    }
    wg.wait();
    {
        std::lock_guard<corral::Mutex> guard(m);
        CHECK(done == 20);
    }
    for (auto& t : threads) t.join();
}

}  // namespace

int main() {
    corral_config cfg;
    corral_config_default(&cfg);
    cfg.kthreads = 2;
    try {
        int answer = corral::run(
            [] {
                run_test("lock_guard_counter", test_lock_guard_counter);
                run_test("spawn_join_values", test_spawn_join_values);
                run_test("condvar_queue", test_condvar_queue);
                run_test("waitgroup", test_waitgroup);
                return 42;
            },
            &cfg);
        if (answer != 42) failed++;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "corral::run failed: %s\n", e.what());
        failed++;
    }

    cfg.kthreads = 0;
    run_test("bad_config_throws", [&] {
        bool threw = false;
        try {
            corral::run([] {}, &cfg);
        } catch (const std::system_error& e) {
            threw = e.code().value() == EINVAL;
        }
        CHECK(threw);
    });

    std::printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
