// Thin C++17 wrappers over corral.h: RAII ownership, std::lock_guard-compatible locking, and
// spawn/run taking any callable. Failures throw std::system_error carrying the errno value.
//
// Exceptions never cross into the runtime (unwinding through it is undefined behaviour): an
// exception escaping a spawned callable is caught in the uthread and rethrown by join().
#ifndef CORRAL_HPP
#define CORRAL_HPP

#include "corral.h"

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <system_error>
#include <type_traits>
#include <utility>

namespace corral {

namespace detail {

[[noreturn]] inline void throw_error(int rc, const char* what) {
    throw std::system_error(-rc, std::generic_category(), what);
}

inline void check(int rc, const char* what) {
    if (rc != 0) throw_error(rc, what);
}

// The result of a callable, or what it threw. void results are handled by the specialization.
template <class R>
struct Outcome {
    std::optional<R> value;
    std::exception_ptr error;
    template <class F>
    void run(F& f) noexcept {
        try {
            value.emplace(f());
        } catch (...) {
            error = std::current_exception();
        }
    }
    R take() {
        if (error) std::rethrow_exception(error);
        return std::move(*value);
    }
};

template <>
struct Outcome<void> {
    std::exception_ptr error;
    template <class F>
    void run(F& f) noexcept {
        try {
            f();
        } catch (...) {
            error = std::current_exception();
        }
    }
    void take() {
        if (error) std::rethrow_exception(error);
    }
};

template <class F>
struct Task {
    using R = std::invoke_result_t<F&>;
    F f;
    Outcome<R> outcome;

    // noexcept: Outcome::run catches everything, so nothing unwinds into the runtime.
    static void* trampoline(void* self) noexcept {
        auto* task = static_cast<Task*>(self);
        task->outcome.run(task->f);
        return nullptr;
    }
    static void run_void(void* self) noexcept { trampoline(self); }
};

}  // namespace detail

// A mutex meeting the Lockable requirements, so std::lock_guard and std::unique_lock work.
class Mutex {
public:
    Mutex() : m_(corral_mutex_new()) {
        if (!m_) throw std::bad_alloc();
    }
    ~Mutex() { corral_mutex_free(m_); }
    Mutex(const Mutex&) = delete;
    Mutex& operator=(const Mutex&) = delete;

    void lock() { detail::check(corral_mutex_lock(m_), "corral_mutex_lock"); }
    bool try_lock() noexcept { return corral_mutex_trylock(m_) == 0; }
    // noexcept: lock guards call it from destructors. It only fails for a non-holder, which
    // std::lock_guard never is.
    void unlock() noexcept { corral_mutex_unlock(m_); }
    corral_mutex_t* native_handle() noexcept { return m_; }

private:
    corral_mutex_t* m_;
};

class CondVar {
public:
    CondVar() : cv_(corral_condvar_new()) {
        if (!cv_) throw std::bad_alloc();
    }
    ~CondVar() { corral_condvar_free(cv_); }
    CondVar(const CondVar&) = delete;
    CondVar& operator=(const CondVar&) = delete;

    void wait(std::unique_lock<Mutex>& lock) {
        detail::check(corral_condvar_wait(cv_, lock.mutex()->native_handle()),
                      "corral_condvar_wait");
    }
    template <class Pred>
    void wait(std::unique_lock<Mutex>& lock, Pred pred) {
        while (!pred()) wait(lock);
    }
    // std::cv_status::timeout once `timeout` has passed without a notification.
    std::cv_status wait_for(std::unique_lock<Mutex>& lock, std::chrono::microseconds timeout) {
        int rc = corral_condvar_timedwait(cv_, lock.mutex()->native_handle(),
                                          timeout.count() < 0 ? 0 : uint64_t(timeout.count()));
        if (rc == -ETIMEDOUT) return std::cv_status::timeout;
        detail::check(rc, "corral_condvar_timedwait");
        return std::cv_status::no_timeout;
    }
    void notify_one() noexcept { corral_condvar_signal(cv_); }
    void notify_all() noexcept { corral_condvar_broadcast(cv_); }

private:
    corral_condvar_t* cv_;
};

class WaitGroup {
public:
    WaitGroup() : wg_(corral_waitgroup_new()) {
        if (!wg_) throw std::bad_alloc();
    }
    ~WaitGroup() { corral_waitgroup_free(wg_); }
    WaitGroup(const WaitGroup&) = delete;
    WaitGroup& operator=(const WaitGroup&) = delete;

    void add(size_t n = 1) { detail::check(corral_waitgroup_add(wg_, n), "corral_waitgroup_add"); }
    void done() { detail::check(corral_waitgroup_done(wg_), "corral_waitgroup_done"); }
    void wait() { detail::check(corral_waitgroup_wait(wg_), "corral_waitgroup_wait"); }

private:
    corral_waitgroup_t* wg_;
};

// A uthread running a callable returning R. Destroying a handle that was not joined joins it
// (as std::jthread does) and drops the result, so the callable's state is never leaked.
template <class R>
class Thread {
public:
    // A moved-from Thread is empty: exactly one owner may join the uthread.
    Thread(Thread&& other) noexcept
        : handle_(std::exchange(other.handle_, nullptr)), state_(std::move(other.state_)) {}
    Thread& operator=(Thread&& other) noexcept {
        if (this != &other) {
            finish();
            handle_ = std::exchange(other.handle_, nullptr);
            state_ = std::move(other.state_);
        }
        return *this;
    }
    ~Thread() { finish(); }

    bool joinable() const noexcept { return handle_ != nullptr; }

    // Waits for the callable and returns its result, or rethrows what it threw.
    R join() {
        if (!handle_) throw std::system_error(EINVAL, std::generic_category(), "join");
        detail::check(corral_join(std::exchange(handle_, nullptr), nullptr), "corral_join");
        return state_->take();
    }

private:
    template <class F>
    friend auto spawn(F&& f) -> Thread<std::invoke_result_t<std::decay_t<F>&>>;

    struct State {
        virtual ~State() = default;
        virtual R take() = 0;
    };
    template <class F>
    struct Holder : State {
        detail::Task<F> task;
        explicit Holder(F f) : task{std::move(f), {}} {}
        R take() override { return task.outcome.take(); }
    };

    Thread(corral_thread_t* handle, std::unique_ptr<State> state)
        : handle_(handle), state_(std::move(state)) {}

    void finish() noexcept {
        if (handle_) corral_join(std::exchange(handle_, nullptr), nullptr);
    }

    corral_thread_t* handle_ = nullptr;
    std::unique_ptr<State> state_;
};

// Spawns `f()` as a uthread of the calling uthread's runtime.
template <class F>
auto spawn(F&& f) -> Thread<std::invoke_result_t<std::decay_t<F>&>> {
    using Fn = std::decay_t<F>;
    using R = std::invoke_result_t<Fn&>;
    using Holder = typename Thread<R>::template Holder<Fn>;
    auto holder = std::make_unique<Holder>(Fn(std::forward<F>(f)));
    corral_thread_t* handle = nullptr;
    detail::check(corral_spawn(&handle, &detail::Task<Fn>::trampoline, &holder->task),
                  "corral_spawn");
    return Thread<R>(handle, std::move(holder));
}

// Starts a runtime with `config` (defaults if null), runs `f()` on it and returns its result
// (or rethrows what it threw) after the runtime has shut down.
template <class F>
auto run(F&& f, const corral_config* config = nullptr) -> std::invoke_result_t<std::decay_t<F>&> {
    using Fn = std::decay_t<F>;
    detail::Task<Fn> task{Fn(std::forward<F>(f)), {}};
    detail::check(corral_run(config, &detail::Task<Fn>::run_void, &task), "corral_run");
    return task.outcome.take();
}

}  // namespace corral

#endif  // CORRAL_HPP
