//! Changing a running instance (halcmd on a live HAL): `addf`/`delf` publish a thread's new run
//! list and wait (bounded) for the thread to take it; `add_function` fills a free slot with a
//! function loaded while running; `retire_functions` frees the slots of unloaded ones. Every change
//! holds the live lock; the RT threads never wait on one (`runlist.rs`, `slots.rs`).

use super::{health, runlist, slots, FunctionFactory, Running, Runtime, RuntimeError};
use rtapi_hal::{ComponentKey, HalError};
use std::sync::Arc;
use std::time::Duration;

/// How long a structural change waits for a thread to take its new run list.
const TAKE_WAIT: Duration = Duration::from_secs(1);

impl Runtime<Running> {
    /// halcmd's `addf FUNCTION THREAD [POSITION]` on the running instance (`position` 0 = first,
    /// `None` = last): the segment's run list changes, and the thread runs the function from its next
    /// period on. Refused, with nothing changed, if the function is in a thread already, or if a
    /// thread has not taken its previous change (stalled or stopped).
    pub fn addf(
        &self,
        function: &str,
        thread: &str,
        position: Option<usize>,
    ) -> Result<(), RuntimeError> {
        let _guard = self.state.live.lock().unwrap_or_else(|p| p.into_inner());
        let i = self.thread_index(thread)?;
        self.check_taken()?;
        self.state.hal.addf(function, thread, position)?;
        match self.publish(i) {
            Err(
                e @ (runlist::PublishError::PreviousNotTaken | runlist::PublishError::TooLong(_)),
            ) => {
                let _ = self.state.hal.delf(function, thread);
                Err(RuntimeError::Config(format!(
                    "addf {function} {thread}: {e}"
                )))
            }
            Err(runlist::PublishError::NotTakenYet) => {
                log::warn!("addf {function} {thread}: the thread has not taken the change yet");
                Ok(())
            }
            Ok(()) => Ok(()),
        }
    }

    /// halcmd's `delf FUNCTION THREAD` on the running instance: once this returns Ok, the thread
    /// no longer calls the function (the function may be added to another thread).
    pub fn delf(&self, function: &str, thread: &str) -> Result<(), RuntimeError> {
        let _guard = self.state.live.lock().unwrap_or_else(|p| p.into_inner());
        let i = self.thread_index(thread)?;
        self.check_taken()?;
        self.state.hal.delf(function, thread)?;
        self.publish(i).map_err(|e| {
            RuntimeError::Config(format!(
                "delf {function} {thread}: the segment no longer lists it, but {e}"
            ))
        })
    }

    /// A function loaded while the instance runs (halcmd's `loadrt` of a component): registered in
    /// the segment with its health objects (`<name>.time`, `.tmax`, `.tmax-increased`), its closure
    /// made from the live HAL at once and put in a free slot. It runs once `addf` adds it.
    pub fn add_function(
        &self,
        component: ComponentKey,
        name: &str,
        factory: FunctionFactory,
    ) -> Result<(), RuntimeError> {
        let _guard = self.state.live.lock().unwrap_or_else(|p| p.into_inner());
        let slots = &self.state.slots;
        if slots.is_full() {
            return Err(RuntimeError::Config(format!(
                "function {name}: this instance has room for {} functions and all are used;                  restart it to load more",
                slots.capacity()
            )));
        }
        let hal = &self.state.hal;
        let key = hal.add_function(component, name)?;
        let health = health::add_function(hal, component, name)?;
        let body = factory(hal);
        let slot = slots::FunctionSlot::new(
            name.to_string(),
            body,
            Some(hal.function_timer(key)),
            Some(health),
        );
        let n = slots
            .put(slot)
            .ok_or_else(|| RuntimeError::Config(format!("function {name}: no free slot left")))?;
        self.state
            .slot_of
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, n);
        Ok(())
    }

    /// Frees the slots of functions `names` that no thread runs any more (their component was
    /// unloaded): their closures go now, with what they own (a sampler's FIFO file in /dev/shm), and
    /// the next function loaded takes the slot. Refused, with nothing done, while a thread has not
    /// taken its latest run list (stalled or stopped): it may still hold one of them.
    pub fn retire_functions(&self, names: &[String]) -> Result<usize, RuntimeError> {
        let _guard = self.state.live.lock().unwrap_or_else(|p| p.into_inner());
        self.check_taken()?;
        let running: std::collections::HashSet<u32> =
            self.state.lists.iter().flat_map(|l| l.current()).collect();
        let slots = &self.state.slots;
        let mut retired = 0;
        for n in 0..slots.len() as u32 {
            let Some(slot) = slots.get(n) else { continue };
            if running.contains(&n) || !names.iter().any(|f| f == slot.name()) {
                continue;
            }
            // SAFETY: every thread took its latest list (checked above, under the live lock that
            // every list change takes), and no current list holds slot `n`: no thread calls it or
            // will, and no other control-side access to the table runs (same lock).
            if unsafe { slots.free(n) } {
                retired += 1;
                self.state
                    .slot_of
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .retain(|_, &mut m| m != n);
            }
        }
        Ok(retired)
    }

    fn thread_index(&self, thread: &str) -> Result<usize, RuntimeError> {
        self.state
            .threads
            .iter()
            .position(|t| t.info.name == thread)
            .ok_or_else(|| {
                RuntimeError::Hal(HalError::NotFound {
                    kind: rtapi_hal::ObjectKind::Thread,
                    name: thread.to_string(),
                })
            })
    }

    /// Every looping thread has taken its last run list (so a function removed from one is free).
    fn check_taken(&self) -> Result<(), RuntimeError> {
        for (t, list) in self.state.threads.iter().zip(&self.state.lists) {
            if t.heartbeat.looping() && !list.taken() {
                return Err(RuntimeError::Config(format!(
                    "thread {} has not taken its previous function list yet (stalled or stopped?);                      nothing changed",
                    t.info.name
                )));
            }
        }
        Ok(())
    }

    /// Publishes thread `i`'s run list as the segment has it now.
    fn publish(&self, i: usize) -> Result<(), runlist::PublishError> {
        let list: Vec<u32> = self
            .state
            .hal
            .thread_functions(self.state.thread_keys[i])
            .iter()
            .filter_map(|k| {
                self.state
                    .slot_of
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get(k)
                    .copied()
            })
            .collect();
        let hb = Arc::clone(&self.state.threads[i].heartbeat);
        self.state.lists[i].publish(&list, &move || hb.looping(), TAKE_WAIT)
    }

    /// The functions a thread runs now, in order.
    pub fn thread_functions(&self, thread: &str) -> Result<Vec<String>, RuntimeError> {
        let i = self.thread_index(thread)?;
        let _guard = self.state.live.lock().unwrap_or_else(|p| p.into_inner());
        Ok(self.state.lists[i]
            .current()
            .into_iter()
            .map(|n| self.state.slots.name(n).to_string())
            .collect())
    }
}
