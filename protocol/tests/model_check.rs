//! Model check of the checkpoint protocol (`protocol/PROTOCOL.md`).
//!
//! Why a model check: the protocol is only as good as its worst interleaving of crashes, pauses,
//! lease expiry, redelivery and operator restarts, and tests that run a cluster only sample a few.
//! Here stateright explores every interleaving of a small system breadth-first: an operator, two
//! readers and two messages in an SQS queue, with the real `coordinator::step`, `ReaderEpochs`,
//! `classify` and `rejoin` deciding what each party does. The model supplies only what the code
//! leaves to I/O: the queue, the ConfigMaps (every write a compare-and-swap), a transactional sink,
//! a clock reduced to "the interval elapsed" and "this lease ran out", and faults.
//!
//! Abstractions, each a promise the real I/O must keep:
//! - a message held by a reader becomes visible again only once that reader's lease ran out or was
//!   taken over (the reader renews its lease only after extending the visibility of everything it
//!   holds beyond the new expiry; PROTOCOL.md "lease and visibility");
//! - a running, unpaused reader renews in time: only a paused or crashed reader's lease runs out;
//! - a delete is confirmed only when sent while the lease was valid (its receipt was current);
//! - redelivered messages are classified against a fresh read of leases, then the checkpoint;
//! - the operator acts on a cached list of leases (stale acks and incarnations) that a restart
//!   throws away; expiry it reads from the clock, which the cache cannot make stale.
//!
//! Violations that happen during a transition (a delete of an uncommitted epoch, a commit without
//! acks, ...) are recorded in the state as they happen and checked by `always` properties.

use std::collections::{BTreeMap, BTreeSet};

use sluice_protocol::coordinator::{self, Action as OpAction, Clock, LeaseView};
use sluice_protocol::reader_epoch::{Command, ReaderEpochs, Standing};
use sluice_protocol::{
    Checkpoint, Epoch, EpochKey, IdSet, Incarnation, Lease, Redelivery, can_rejoin, classify, rejoin,
};
use stateright::{Checker, HasDiscoveries, Model, Property};

const READERS: usize = 2;
const INTERVAL_MS: i64 = 1_000;

const DELETE_UNCOMMITTED: &str = "a receipt was deleted or an output committed outside a commit";
const COMMIT_WITHOUT_ACK: &str = "an epoch committed without the ack of a live reader";
const FENCED_ACTED: &str = "a fenced reader deleted or committed after its fence";
const CONFIRMED_NOT_DELETED: &str = "a delete was confirmed but the message is still in the queue";

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Msg {
    Visible,
    InFlight { reader: usize, incarnation: Incarnation },
    Deleted,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Proc {
    Running {
        machine: ReaderEpochs,
        /// Commands issued and not yet carried out, run in order (a pipeline may overlap them;
        /// the state machine issues each only once its prerequisites are answered).
        todo: Vec<Command>,
        /// Receipts held: message -> (epoch, delivered to the sink).
        receipts: BTreeMap<usize, (Epoch, bool)>,
        paused: bool,
    },
    Crashed,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    checkpoint: Checkpoint,
    leases: Vec<Option<Lease>>,
    /// The current lease of each reader ran out (time passed without a renewal).
    expired: Vec<bool>,
    procs: Vec<Proc>,
    incarnations: Vec<u64>,
    /// The operator's informer cache of leases: (pod, incarnation, acked epoch).
    operator_cache: Option<Vec<(String, Incarnation, Epoch)>>,
    queue: Vec<Msg>,
    /// Sink output staged per epoch key, and the keys made visible.
    staged: BTreeMap<EpochKey, BTreeSet<usize>>,
    visible: BTreeSet<EpochKey>,
    /// Ghost: who each commit rested on.
    barriers: BTreeMap<Epoch, BTreeSet<(String, Incarnation)>>,
    faults: u8,
    /// Ghost: some reader was fenced while running and rejoined with a new incarnation.
    rejoined_after_fence: bool,
    violations: BTreeSet<&'static str>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Action {
    Receive(usize, usize),
    Deliver(usize, usize),
    Run(usize),
    Observe(usize),
    NoticeLeaseLost(usize),
    Crash(usize),
    Restart(usize),
    Pause(usize),
    Resume(usize),
    Expire(usize),
    Lapse(usize),
    OperatorSync,
    OperatorStep { elapsed: bool },
    OperatorRestart,
}

/// The bounds of the explored system. The defaults finish in about a minute in a debug build;
/// `SLUICE_MODEL_MESSAGES`, `SLUICE_MODEL_EPOCHS`, `SLUICE_MODEL_FAULTS` and
/// `SLUICE_MODEL_INCARNATIONS` raise them for a longer run by hand.
struct Protocol {
    messages: usize,
    /// The operator opens epochs up to this one.
    max_open: Epoch,
    /// Reader crashes, pauses and operator restarts, in total.
    max_faults: u8,
    /// Incarnations per reader, the first included.
    max_incarnations: u64,
    /// A deliberate protocol bug, to show that the properties catch it.
    mutation: Option<Mutation>,
}

/// Deliberate bugs: each must make some `always` property fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mutation {
    /// A restarted reader starts with an empty lease instead of keeping committed entries.
    RejoinForgetsCommitted,
    /// The operator never sees a lease run out (no fencing, zombies stay in the barrier).
    OperatorIgnoresExpiry,
}

impl Protocol {
    fn from_env() -> Self {
        fn knob<T: std::str::FromStr>(name: &str, default: T) -> T {
            std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
        }
        Protocol {
            messages: knob("SLUICE_MODEL_MESSAGES", 1),
            max_open: knob("SLUICE_MODEL_EPOCHS", 3),
            max_faults: knob("SLUICE_MODEL_FAULTS", 1),
            max_incarnations: knob("SLUICE_MODEL_INCARNATIONS", 2),
            mutation: None,
        }
    }
}

fn pod(reader: usize) -> String {
    format!("r{reader}")
}

fn msg_id(m: usize) -> String {
    format!("m{m}")
}

fn msg_index(id: &str) -> usize {
    id[1..].parse().expect("model ids are m<index>")
}

fn reader_index(pod: &str) -> usize {
    pod[1..].parse().expect("model pods are r<index>")
}

fn incarnation(reader: usize, n: u64) -> Incarnation {
    Incarnation(reader as u64 * 100 + n)
}

impl State {
    fn own_incarnation(&self, reader: usize) -> Option<Incarnation> {
        match &self.procs[reader] {
            Proc::Running { machine, .. } => Some(machine.incarnation()),
            Proc::Crashed => None,
        }
    }

    /// The lease of `reader` currently belongs to `inc` and has not run out.
    fn lease_valid(&self, reader: usize, inc: Incarnation) -> bool {
        self.leases[reader].as_ref().is_some_and(|l| l.incarnation == inc) && !self.expired[reader]
    }

    /// Committed for this key: its epoch is committed and the key's incarnation was in the barrier.
    fn committed_for(&self, key: &EpochKey) -> bool {
        key.epoch <= self.checkpoint.committed
            && self.barriers.get(&key.epoch).is_some_and(|b| b.contains(&(key.pod.clone(), key.incarnation)))
    }

    /// Ghost checks for `actor` (a reader incarnation) finalizing or deleting under `key`.
    fn check_finalize(&mut self, actor_pod: &str, actor: Incarnation, key: &EpochKey) {
        if !self.committed_for(key) {
            self.violations.insert(DELETE_UNCOMMITTED);
        }
        if let Some(m) = self.checkpoint.members.get(actor_pod)
            && m.incarnation == actor
            && key.incarnation == actor
            && m.fenced.is_some_and(|t| key.epoch > t)
        {
            self.violations.insert(FENCED_ACTED);
        }
    }

    fn output_count(&self, m: usize) -> usize {
        self.visible.iter().filter(|k| self.staged.get(*k).is_some_and(|s| s.contains(&m))).count()
    }

    /// A new incarnation of `reader` takes its lease over.
    fn rejoin(&mut self, reader: usize, mutation: Option<Mutation>) {
        self.incarnations[reader] += 1;
        let inc = incarnation(reader, self.incarnations[reader]);
        let (lease, _) = match &self.leases[reader] {
            Some(old) if mutation != Some(Mutation::RejoinForgetsCommitted) => {
                rejoin(&self.checkpoint, old, inc, 0)
            }
            _ => (Lease::new(&pod(reader), inc, 0, 10), Vec::new()),
        };
        let (machine, todo) = ReaderEpochs::rejoined(&pod(reader), inc, &lease.ids);
        self.leases[reader] = Some(lease);
        self.expired[reader] = false;
        self.procs[reader] = Proc::Running { machine, todo, receipts: BTreeMap::new(), paused: false };
    }

    fn may_rejoin(&self, reader: usize, max_incarnations: u64) -> bool {
        self.incarnations[reader] < max_incarnations
            && self.leases[reader].as_ref().is_none_or(|l| can_rejoin(&self.checkpoint, l))
    }
}

impl Model for Protocol {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let leases = (0..READERS).map(|r| Some(Lease::new(&pod(r), incarnation(r, 1), 0, 10))).collect();
        let procs = (0..READERS)
            .map(|r| Proc::Running {
                machine: ReaderEpochs::new(&pod(r), incarnation(r, 1)),
                todo: Vec::new(),
                receipts: BTreeMap::new(),
                paused: false,
            })
            .collect();
        vec![State {
            checkpoint: Checkpoint::initial(0),
            leases,
            expired: vec![false; READERS],
            procs,
            incarnations: vec![1; READERS],
            operator_cache: None,
            queue: vec![Msg::Visible; self.messages],
            staged: BTreeMap::new(),
            visible: BTreeSet::new(),
            barriers: BTreeMap::new(),
            faults: 0,
            rejoined_after_fence: false,
            violations: BTreeSet::new(),
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        let can_fault = s.faults < self.max_faults;
        for r in 0..READERS {
            match &s.procs[r] {
                Proc::Running { machine, todo, receipts, paused } => {
                    if *paused {
                        actions.push(Action::Resume(r));
                    } else {
                        for m in 0..s.queue.len() {
                            if s.queue[m] == Msg::Visible && machine.can_receive() {
                                actions.push(Action::Receive(r, m));
                            }
                            if receipts.get(&m).is_some_and(|(_, delivered)| !delivered) {
                                actions.push(Action::Deliver(r, m));
                            }
                        }
                        if !todo.is_empty() {
                            actions.push(Action::Run(r));
                        }
                        actions.push(Action::Observe(r));
                        if !s.lease_valid(r, machine.incarnation())
                            && matches!(machine.standing(), Standing::Member | Standing::Joining)
                        {
                            actions.push(Action::NoticeLeaseLost(r));
                        }
                        if can_fault {
                            actions.push(Action::Pause(r));
                        }
                    }
                    if can_fault {
                        actions.push(Action::Crash(r));
                    }
                    if *paused && !s.expired[r] {
                        actions.push(Action::Expire(r));
                    }
                }
                Proc::Crashed => {
                    if s.may_rejoin(r, self.max_incarnations) {
                        actions.push(Action::Restart(r));
                    }
                    if s.leases[r].is_some() && !s.expired[r] {
                        actions.push(Action::Expire(r));
                    }
                }
            }
        }
        for m in 0..s.queue.len() {
            if let Msg::InFlight { reader, incarnation } = s.queue[m]
                && !s.lease_valid(reader, incarnation)
            {
                actions.push(Action::Lapse(m));
            }
        }
        actions.push(Action::OperatorSync);
        if s.operator_cache.is_some() {
            actions.push(Action::OperatorStep { elapsed: false });
            if s.checkpoint.open < self.max_open {
                actions.push(Action::OperatorStep { elapsed: true });
            }
            if can_fault {
                actions.push(Action::OperatorRestart);
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Receive(r, m) => receive(&mut s, r, m),
            Action::Deliver(r, m) => {
                let inc = s.own_incarnation(r)?;
                let Proc::Running { machine, todo, receipts, .. } = &mut s.procs[r] else { return None };
                let (epoch, delivered) = receipts.get_mut(&m)?;
                *delivered = true;
                let epoch = *epoch;
                s.staged.entry(EpochKey { pod: pod(r), incarnation: inc, epoch }).or_default().insert(m);
                todo.extend(machine.settled(epoch, &msg_id(m), true));
            }
            Action::Run(r) => run(&mut s, r, self.max_incarnations, self.mutation)?,
            Action::Observe(r) => {
                let cp = s.checkpoint.clone();
                let Proc::Running { machine, todo, .. } = &mut s.procs[r] else { return None };
                todo.extend(machine.observe(&cp));
            }
            Action::NoticeLeaseLost(r) => {
                let Proc::Running { machine, todo, .. } = &mut s.procs[r] else { return None };
                todo.extend(machine.lease_lost());
            }
            Action::Crash(r) => {
                s.procs[r] = Proc::Crashed;
                s.faults += 1;
            }
            Action::Restart(r) => s.rejoin(r, self.mutation),
            Action::Pause(r) => {
                let Proc::Running { paused, .. } = &mut s.procs[r] else { return None };
                *paused = true;
                s.faults += 1;
            }
            Action::Resume(r) => {
                let Proc::Running { paused, .. } = &mut s.procs[r] else { return None };
                *paused = false;
            }
            Action::Expire(r) => s.expired[r] = true,
            Action::Lapse(m) => s.queue[m] = Msg::Visible,
            Action::OperatorSync => {
                s.operator_cache = Some(
                    s.leases
                        .iter()
                        .flatten()
                        .map(|l| (l.holder.clone(), l.incarnation, l.acked_epoch))
                        .collect(),
                );
            }
            Action::OperatorRestart => {
                s.operator_cache = None;
                s.faults += 1;
            }
            Action::OperatorStep { elapsed } => operator_step(&mut s, elapsed, self.mutation)?,
        }
        (s != *last).then_some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "a receipt is deleted only if its epoch committed with its reader",
                |_, s: &State| !s.violations.contains(DELETE_UNCOMMITTED),
            ),
            Property::always("a commit waits for every live, unfenced reader's ack", |_, s: &State| {
                !s.violations.contains(COMMIT_WITHOUT_ACK)
            }),
            Property::always("a fenced reader never deletes nor commits", |_, s: &State| {
                !s.violations.contains(FENCED_ACTED)
            }),
            Property::always("a confirmed delete took effect", |_, s: &State| {
                !s.violations.contains(CONFIRMED_NOT_DELETED)
            }),
            Property::always(
                "no message is lost: a deleted message is in the committed output",
                |_, s: &State| {
                    (0..s.queue.len()).all(|m| s.queue[m] != Msg::Deleted || s.output_count(m) == 1)
                },
            ),
            Property::always("each message is in the committed output at most once", |_, s: &State| {
                (0..s.queue.len()).all(|m| s.output_count(m) <= 1)
            }),
            Property::sometimes("a message is deleted", |_, s: &State| s.queue.contains(&Msg::Deleted)),
            Property::sometimes("every message is deleted", |_, s: &State| {
                s.queue.iter().all(|m| *m == Msg::Deleted)
            }),
            Property::sometimes("a committed message is deleted by another incarnation", |_, s: &State| {
                (0..s.queue.len()).any(|m| {
                    s.queue[m] == Msg::Deleted
                        && s.visible.iter().any(|k| {
                            s.staged.get(k).is_some_and(|set| set.contains(&m))
                                && s.leases
                                    .iter()
                                    .flatten()
                                    .any(|l| l.ids.contains_key(&(k.incarnation, k.epoch)))
                        })
                })
            }),
            Property::sometimes("a fenced reader rejoins", |_, s: &State| s.rejoined_after_fence),
        ]
    }
}

fn receive(s: &mut State, r: usize, m: usize) {
    let id = msg_id(m);
    let verdict = classify(&id, &s.checkpoint, s.leases.iter().flatten());
    let inc = s.own_incarnation(r).expect("only running readers receive");
    match verdict {
        Redelivery::Fresh => {
            let Proc::Running { machine, receipts, .. } = &mut s.procs[r] else { return };
            // A message we still hold that came back keeps its tag and takes the fresh receipt.
            receipts.entry(m).or_insert_with(|| {
                (machine.tag().expect("receive is offered only when tagging is allowed"), false)
            });
            s.queue[m] = Msg::InFlight { reader: r, incarnation: inc };
        }
        Redelivery::Committed(key) => {
            s.check_finalize(&pod(r), inc, &key);
            s.visible.insert(key.clone());
            s.queue[m] = Msg::Deleted;
            let Proc::Running { machine, todo, receipts, .. } = &mut s.procs[r] else { return };
            receipts.remove(&m);
            todo.extend(machine.redelivered_deleted(&key, &id));
        }
        Redelivery::Undecided => {}
    }
}

fn run(s: &mut State, r: usize, max_incarnations: u64, mutation: Option<Mutation>) -> Option<()> {
    let inc = s.own_incarnation(r)?;
    let may_rejoin = s.may_rejoin(r, max_incarnations);
    let Proc::Running { todo, .. } = &mut s.procs[r] else { return None };
    let command = todo.first()?.clone();
    if command == Command::Rejoin {
        // Rejoin replaces this process state, so it runs last.
        if todo.len() > 1 || !may_rejoin {
            return None;
        }
        s.rejoin(r, mutation);
        s.rejoined_after_fence = true;
        return Some(());
    }
    todo.remove(0);
    let lease_is_mine = s.leases[r].as_ref().is_some_and(|l| l.incarnation == inc);
    let more = match command {
        Command::PreCommit(epoch) => machine(s, r).pre_committed(epoch),
        Command::WriteAck { through, entries } => {
            if lease_is_mine {
                let lease = s.leases[r].as_mut()?;
                lease.acked_epoch = through;
                for (epoch, ids) in entries {
                    lease.ids.insert((inc, epoch), ids);
                }
                machine(s, r).ack_written(through)
            } else {
                machine(s, r).lease_lost()
            }
        }
        Command::Commit(key) => {
            s.check_finalize(&pod(r), inc, &key);
            s.visible.insert(key.clone());
            if key.incarnation == inc { machine(s, r).sink_committed(key.epoch) } else { Vec::new() }
        }
        Command::Delete { epoch, ids } => {
            let key = EpochKey { pod: pod(r), incarnation: inc, epoch };
            s.check_finalize(&pod(r), inc, &key);
            let valid = s.lease_valid(r, inc);
            for id in &ids {
                let m = msg_index(id);
                if s.queue[m] == (Msg::InFlight { reader: r, incarnation: inc }) {
                    s.queue[m] = Msg::Deleted;
                } else if valid {
                    s.violations.insert(CONFIRMED_NOT_DELETED);
                }
            }
            let Proc::Running { receipts, .. } = &mut s.procs[r] else { return None };
            receipts.retain(|_, (e, _)| *e != epoch);
            let confirmed = if valid { ids } else { IdSet::new() };
            machine(s, r).deleted(epoch, &confirmed)
        }
        Command::Forget { incarnation, epoch } => {
            if lease_is_mine {
                s.leases[r].as_mut()?.ids.remove(&(incarnation, epoch));
                machine(s, r).forgotten(incarnation, epoch)
            } else {
                machine(s, r).lease_lost()
            }
        }
        Command::Abort(epoch) => {
            let key = EpochKey { pod: pod(r), incarnation: inc, epoch };
            if !s.visible.contains(&key) {
                s.staged.remove(&key);
            }
            let Proc::Running { receipts, .. } = &mut s.procs[r] else { return None };
            let released: Vec<usize> =
                receipts.iter().filter(|(_, (e, _))| *e == epoch).map(|(m, _)| *m).collect();
            for m in released {
                receipts.remove(&m);
                if s.queue[m] == (Msg::InFlight { reader: r, incarnation: inc }) {
                    s.queue[m] = Msg::Visible;
                }
            }
            Vec::new()
        }
        Command::Rejoin => unreachable!("handled above"),
    };
    let Proc::Running { todo, .. } = &mut s.procs[r] else { return None };
    todo.extend(more);
    Some(())
}

fn machine(s: &mut State, r: usize) -> &mut ReaderEpochs {
    match &mut s.procs[r] {
        Proc::Running { machine, .. } => machine,
        Proc::Crashed => unreachable!("commands run only in running readers"),
    }
}

fn operator_step(s: &mut State, elapsed: bool, mutation: Option<Mutation>) -> Option<()> {
    let cache = s.operator_cache.as_ref()?;
    let views: Vec<LeaseView> = cache
        .iter()
        .map(|(p, inc, acked)| {
            let r = reader_index(p);
            LeaseView {
                pod: p.clone(),
                incarnation: *inc,
                acked_epoch: *acked,
                expired: mutation != Some(Mutation::OperatorIgnoresExpiry) && !s.lease_valid(r, *inc),
            }
        })
        .collect();
    let now_ms = s.checkpoint.opened_at_ms + if elapsed { INTERVAL_MS } else { 0 };
    let step = coordinator::step(&s.checkpoint, &views, Clock { now_ms, interval_ms: INTERVAL_MS });
    if step.actions.is_empty() {
        return None;
    }
    for action in &step.actions {
        if let OpAction::Commit { epoch, barrier } = action {
            for (p, inc) in barrier {
                let r = reader_index(p);
                let acked =
                    s.leases[r].as_ref().is_some_and(|l| l.incarnation == *inc && l.acked_epoch >= *epoch);
                if !acked || !s.lease_valid(r, *inc) {
                    s.violations.insert(COMMIT_WITHOUT_ACK);
                }
            }
            s.barriers.insert(*epoch, barrier.iter().cloned().collect());
        }
    }
    s.checkpoint = step.checkpoint;
    Some(())
}

/// The bounds run by the test command: one message, three epochs, one fault (a crash, a pause or
/// an operator restart) and two incarnations per reader. Larger bounds, run by hand with the
/// `SLUICE_MODEL_*` variables, are listed in PROTOCOL.md with their state counts.
#[test]
fn checkpoint_protocol_model_check() {
    let started = std::time::Instant::now();
    let checker =
        Protocol::from_env().checker().threads(2).finish_when(HasDiscoveries::AnyFailures).spawn_bfs().join();
    let (states, unique, depth) = (checker.state_count(), checker.unique_state_count(), checker.max_depth());
    checker.assert_properties();
    println!(
        "model check: {unique} states ({states} visited, depth {depth}) in {:.1?}, all invariants hold",
        started.elapsed()
    );
}

/// The properties have teeth: each deliberate bug is caught with a counterexample.
#[test]
fn the_model_check_catches_protocol_bugs() {
    for (mutation, property) in [
        (Mutation::RejoinForgetsCommitted, "each message is in the committed output at most once"),
        (Mutation::OperatorIgnoresExpiry, "each message is in the committed output at most once"),
    ] {
        let model = Protocol {
            messages: 1,
            max_open: 3,
            max_faults: 1,
            max_incarnations: 2,
            mutation: Some(mutation),
        };
        let checker = model
            .checker()
            .threads(1)
            .finish_when(HasDiscoveries::AnyOf([property].into()))
            .spawn_bfs()
            .join();
        let path = checker.discovery(property);
        assert!(path.is_some(), "{mutation:?} went unnoticed by {property:?}");
        println!(
            "model check: {mutation:?} caught by {property:?} after {} states",
            checker.unique_state_count()
        );
    }
}
