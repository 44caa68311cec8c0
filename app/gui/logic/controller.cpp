// The command queue and its worker thread (see controller.h).
#include "logic/controller.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>

#ifdef __linux__
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "base/errors.h"

namespace kvscope::gui {
namespace {

constexpr size_t kMaxQueued = 64;  // more than anyone types ahead; beyond it intents are refused

double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

const char* command_name(const Command& c) {
    static constexpr const char* names[] = {"set prompt", "set source", "prefill", "decode", "step", "run", "pause",
                                            "back", "reset", "cache", "compare", "set options", "load model",
                                            "export step", "export session", "explain heads", "select", "send chat",
                                            "measure lab", "edit cache"};
    static_assert(std::size(names) == std::variant_size_v<Command>);
    return names[c.index()];
}

const char* place_name(Place p) {
    static constexpr const char* names[] = {"controls", "model", "export", "heads", "lab", "edits"};
    return names[int(p)];
}

Place place_of(const Command& c) {
    if (std::holds_alternative<LoadModel>(c)) return Place::Model;
    if (std::holds_alternative<ExportStep>(c) || std::holds_alternative<ExportSession>(c)) return Place::Export;
    if (std::holds_alternative<ExplainHeads>(c)) return Place::Heads;
    if (std::holds_alternative<MeasureLab>(c)) return Place::Lab;
    if (std::holds_alternative<EditCache>(c)) return Place::Edits;
    return Place::Controls;
}

bool stops_run(const Command& c) {
    return std::holds_alternative<Pause>(c) || std::holds_alternative<Back>(c) || std::holds_alternative<Reset>(c) ||
           std::holds_alternative<SetPrompt>(c) || std::holds_alternative<SetSource>(c) ||
           std::holds_alternative<SetOptions>(c) || std::holds_alternative<LoadModel>(c);
}

bool is_step(const Command& c) {
    return std::holds_alternative<Prefill>(c) || std::holds_alternative<Decode>(c) || std::holds_alternative<Step>(c) ||
           std::holds_alternative<Run>(c) || std::holds_alternative<SendChat>(c);
}

// ---- any thread but the worker ----

Controller::Controller(std::shared_ptr<const Model> model, SessionOptions options) {
    options.record = true;
    WorkbenchHooks hooks;
    hooks.activity = [this](std::string what) { set_activity(std::move(what)); };
    hooks.publish = [this] { publish(); };
    bench_ = std::make_unique<Workbench>(std::move(model), options, std::move(hooks));
    publish();
    worker_ = std::thread([this] { worker_loop(); });
}

Controller::~Controller() {
    {
        std::lock_guard<std::mutex> lock(m_);
        shared_.stop = true;
        shared_.queue.clear();
    }
    cv_.notify_all();
    worker_.join();
}

bool Controller::push(Command c) {
    {
        std::lock_guard<std::mutex> lock(m_);
        if (const auto* p = std::get_if<SetPrompt>(&c)) shared_.inputs.prompt = p->text;
        if (const auto* p = std::get_if<SetSource>(&c)) shared_.inputs.source = p->text;
        // Typing while the worker is busy: only the newest text matters.
        const bool text = std::holds_alternative<SetPrompt>(c) || std::holds_alternative<SetSource>(c);
        if (text && !shared_.queue.empty() && shared_.queue.back().index() == c.index()) {
            shared_.queue.back() = std::move(c);
            return true;
        }
        if (shared_.queue.size() >= kMaxQueued) {
            shared_.notice = "busy: " + std::to_string(shared_.queue.size()) +
                             " intents are already waiting; this one was dropped";
            return false;
        }
        shared_.notice.clear();
        shared_.queue.push_back(std::move(c));
    }
    cv_.notify_all();
    return true;
}

Inputs Controller::inputs() const {
    std::lock_guard<std::mutex> lock(m_);
    return shared_.inputs;
}

std::shared_ptr<const Snapshot> Controller::snapshot() const {
    std::lock_guard<std::mutex> lock(m_);
    return shared_.snapshot;
}

Progress Controller::progress() const {
    std::lock_guard<std::mutex> lock(m_);
    Progress p;
    p.busy = !idle_locked();
    p.activity = p.busy ? shared_.activity : std::string();
    p.elapsed_s = p.busy ? now_s() - shared_.activity_start : 0;
    p.running = shared_.run.left != 0;
    p.run_done = shared_.run.done;
    p.run_total = shared_.run.total;
    p.run_limit = shared_.run.limit;
    p.queued = shared_.queue.size();
    p.notice = shared_.notice;
    return p;
}

bool Controller::busy() const {
    std::lock_guard<std::mutex> lock(m_);
    return !idle_locked();
}

void Controller::wait_idle() {
    if (std::this_thread::get_id() == worker_.get_id()) {
        std::fprintf(stderr, "kvscope: Controller::wait_idle called from its own worker thread (it would wait forever)\n");
        std::abort();
    }
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait(lock, [&] { return idle_locked(); });
}

bool Controller::execute(Command c) {
    const uint64_t errors = snapshot()->n_errors;
    push(std::move(c));
    wait_idle();
    return snapshot()->n_errors == errors;
}

void Controller::set_wake(std::function<void()> wake) {
    std::lock_guard<std::mutex> lock(m_);
    shared_.wake = std::move(wake);
}

// ---- the worker ----

void Controller::worker_loop() {
#ifdef __linux__
    // Steps yield to drawing when both want the cores: a lower priority for this thread and for the
    // engine's pool threads when they are first started from here (Linux threads inherit it).
    setpriority(PRIO_PROCESS, pid_t(syscall(SYS_gettid)), 8);
#endif
    for (;;) {
        std::optional<Command> c;
        {
            std::unique_lock<std::mutex> lock(m_);
            shared_.working = false;
            cv_.notify_all();  // wait_idle() may be waiting
            // A run takes the next step unless an intent that can apply between steps is waiting; step
            // intents wait for the run to end, so "decode, decode, decode" makes three steps.
            cv_.wait(lock, [&] { return shared_.stop || shared_.run.left != 0 || !shared_.queue.empty(); });
            if (shared_.stop) return;
            if (!shared_.queue.empty() && (shared_.run.left == 0 || !is_step(shared_.queue.front()))) {
                c = std::move(shared_.queue.front());
                shared_.queue.pop_front();
                if (stops_run(*c) && !std::holds_alternative<Pause>(*c)) shared_.run.left = 0;
            }
            shared_.working = true;
        }
        const Place place = c ? place_of(*c) : Place::Controls;
        try {
            if (c) apply(*c);
            else run_step();
            bench_->settle(place);
        } catch (const std::exception& e) {  // UsageError, LoadError, JsonError: one line where it was asked for
            bench_->fail(place, e.what());
            std::lock_guard<std::mutex> lock(m_);
            shared_.run.left = 0;  // a failed intent or step ends the run
        }
        publish();
    }
}

void Controller::apply(const Command& c) {
    const Decode* decode = std::get_if<Decode>(&c);
    const Run* run = std::get_if<Run>(&c);
    if (std::holds_alternative<Pause>(c)) {
        std::lock_guard<std::mutex> lock(m_);
        if (shared_.run.left) bench_->set_status("paused after " + count_of(shared_.run.done, "step"));
        shared_.run.left = 0;
        return;
    }
    const bool chat = std::holds_alternative<SendChat>(c);
    if (!decode && !run && !chat) {
        bench_->apply(c);
        return;
    }
    if (chat) bench_->apply(c);  // the turn is appended; its prefill and reply run like Run to the end
    const RunPlan plan = bench_->plan_run(decode ? decode->n : run ? run->n : -1, decode != nullptr);
    std::lock_guard<std::mutex> lock(m_);
    shared_.run = {plan.steps, 0, plan.steps, plan.limit, plan.decode_only};
    if (plan.steps == 0) bench_->set_status("nothing to run");
}

void Controller::run_step() {
    bool decode_only = false;
    {
        std::lock_guard<std::mutex> lock(m_);
        decode_only = shared_.run.decode_only;
    }
    const Session::Next next = bench_->next();
    const bool stepped = next != Session::Next::Done && !(decode_only && next != Session::Next::Decode) && bench_->step();
    std::lock_guard<std::mutex> lock(m_);
    RunState& run = shared_.run;
    if (!stepped) run.left = 0;
    else {
        ++run.done;
        if (run.left > 0) --run.left;
    }
    if (run.left == 0) bench_->set_status(bench_->status_after_run(run.done));
    else bench_->set_status("running: " + std::to_string(run.done) +
                            (run.total > 0 ? " / " + std::to_string(run.total) : std::string()) + " steps");
}

void Controller::set_activity(std::string what) {
    std::lock_guard<std::mutex> lock(m_);
    shared_.activity = std::move(what);
    shared_.activity_start = now_s();
}

void Controller::publish() {
    std::shared_ptr<const Snapshot> s = bench_->snapshot();
    std::function<void()> wake;
    {
        std::lock_guard<std::mutex> lock(m_);
        // A freshly loaded encoder-decoder starts from kDefaultSource: the source box shows it too.
        if (s->encoder_decoder() && shared_.inputs.source.empty()) shared_.inputs.source = s->source_text;
        shared_.snapshot = std::move(s);
        wake = shared_.wake;
    }
    if (wake) wake();
}

}  // namespace kvscope::gui
