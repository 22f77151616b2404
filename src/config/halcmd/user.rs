//! User-space components (LinuxCNC's `hal.component` from Python, `rtapi.component()` here): a
//! process outside the owner declares a component with pins and params; the owner adds them to the
//! running instance, in the netlist model and in the segment, so `net` and `show` treat them like any
//! other component's. The owner never runs code for them: the declaring process writes its pins' cells
//! itself (`HalReader::write_own`). The control socket ties each one to the connection that declared
//! it and removes it when that connection closes (ARCHITECTURE.md, "User-space components").

use std::sync::{mpsc, Arc, Mutex};

use rtapi_hal::{HalError, ParamAccess, PinDir, ValueType};

use super::backend::Backend;
use super::model::{Model, ParamInfo, PinInfo};
use super::Session;
use crate::config::invalid_name;
use crate::rt::units::quote;

/// One pin of a user-space component: its full name (`panel.button`), type and direction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserPin {
    /// Full HAL name, starting with the component's name and a dot.
    pub name: String,
    /// Value type.
    pub ty: ValueType,
    /// IN, OUT or IO.
    pub dir: PinDir,
}

/// One param of a user-space component: its full name, type and access from other processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserParam {
    /// Full HAL name, starting with the component's name and a dot.
    pub name: String,
    /// Value type.
    pub ty: ValueType,
    /// RO or RW (for `setp` from other processes; the component writes it either way).
    pub access: ParamAccess,
}

/// Why a user-space component was refused, or could not leave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserWhy {
    /// The instance is not running yet.
    NotRunning,
    /// Its name is not a HAL name (the check's message).
    BadName(String),
    /// A component of that name exists.
    Taken,
    /// A pin or param is not a HAL name (the check's message).
    BadPinName(String),
    /// A pin or param not named `<component>.NAME`.
    NotItsPin(String),
    /// A pin or param of that name exists.
    PinTaken(String),
    /// The declaration itself is malformed (a bad type or direction on the wire).
    Declaration(String),
    /// `exit()` for a component another connection declared.
    NotDeclaredHere,
    /// The segment refused the change (the HAL's message).
    Segment(String),
    /// The instance is stopping.
    Stopping,
    /// The instance dropped the request.
    Dropped,
}

/// A user-space component's request that failed: which component, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserError {
    /// The component's name.
    pub name: String,
    /// Why.
    pub why: UserWhy,
}

impl UserError {
    /// `why` for component `name`.
    pub fn new(name: &str, why: UserWhy) -> Self {
        UserError {
            name: name.to_string(),
            why,
        }
    }
}

impl std::fmt::Display for UserError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "user component {}: ", quote(&self.name))?;
        match &self.why {
            UserWhy::NotRunning => f.write_str(
                "the instance is not running yet (a user-space component joins a running instance)",
            ),
            UserWhy::BadName(m) | UserWhy::BadPinName(m) | UserWhy::Declaration(m) => {
                f.write_str(m)
            }
            UserWhy::Segment(m) => f.write_str(m),
            UserWhy::Taken => write!(f, "a component named {} already exists", quote(&self.name)),
            UserWhy::NotItsPin(n) => write!(
                f,
                "pin or param {} must be named {}.NAME",
                quote(n),
                self.name
            ),
            UserWhy::PinTaken(n) => {
                write!(f, "a pin or param named {} already exists", quote(n))
            }
            UserWhy::NotDeclaredHere => f.write_str("not declared on this connection"),
            UserWhy::Stopping => f.write_str("the instance is stopping"),
            UserWhy::Dropped => f.write_str("the instance dropped the request"),
        }
    }
}

impl std::error::Error for UserError {}

/// A user-space component as its process declares it when it is ready.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UserComponent {
    /// The component's name (`panel`).
    pub name: String,
    /// Its pins.
    pub pins: Vec<UserPin>,
    /// Its params.
    pub params: Vec<UserParam>,
    /// The process that declared it (from the control socket's peer credentials), for `waitusr`
    /// and `unloadusr`.
    pub pid: Option<u32>,
}

impl<H: Backend> Session<H> {
    /// The user-space components present now, in the order they were added.
    pub fn user_components(&self) -> Vec<String> {
        self.model.user.iter().map(|u| u.name.clone()).collect()
    }

    /// Adds a user-space component with its pins and params to the running instance (model and
    /// segment). Refused before the instance runs, for a name already taken, or for a pin or param
    /// not named `<component>.<something>`.
    pub fn add_user_component(&mut self, c: &UserComponent) -> Result<(), UserError> {
        let refused = |why| Err(UserError::new(&c.name, why));
        let Some(live) = self.backend.live() else {
            return refused(UserWhy::NotRunning);
        };
        if let Some(e) = invalid_name("component", &c.name) {
            return refused(UserWhy::BadName(e));
        }
        let taken = self.model.user.iter().any(|u| u.name == c.name)
            || self.model.loaded.iter().any(|l| l.names.contains(&c.name));
        if taken {
            return refused(UserWhy::Taken);
        }
        let prefix = format!("{}.", c.name);
        let mut seen = std::collections::HashSet::new();
        let names = c
            .pins
            .iter()
            .map(|p| &p.name)
            .chain(c.params.iter().map(|p| &p.name));
        for n in names {
            if let Some(e) = invalid_name("pin or param", n) {
                return refused(UserWhy::BadPinName(e));
            }
            if !n.starts_with(&prefix) || n.len() == prefix.len() {
                return refused(UserWhy::NotItsPin(n.clone()));
            }
            if !seen.insert(n.clone())
                || self.model.pins.contains_key(n)
                || self.model.params.contains_key(n)
            {
                return refused(UserWhy::PinTaken(n.clone()));
            }
        }
        // The segment first (in one structural change, checked whole before anything is made: a
        // refused declaration changes nothing, its room included), then the model: user components
        // stay out of the model-diff `sync` of halcmd commands, so one that joins while a command
        // runs (a `loadusr -W` waiting for it) is not made twice or rolled back with it.
        if let Err(e) = live.add_user(c) {
            return refused(UserWhy::Segment(e.to_string()));
        }
        for p in &c.pins {
            self.model.pins.insert(
                p.name.clone(),
                PinInfo {
                    ty: p.ty,
                    dir: p.dir,
                    owner: c.name.clone(),
                    default: rtapi_hal::Value::from_bits(p.ty, 0),
                },
            );
        }
        for p in &c.params {
            self.model.params.insert(
                p.name.clone(),
                ParamInfo {
                    ty: p.ty,
                    access: p.access,
                    owner: c.name.clone(),
                    default: rtapi_hal::Value::from_bits(p.ty, 0),
                },
            );
        }
        self.model.user.push(c.clone());
        Ok(())
    }

    /// Removes a user-space component: its pins leave their signals (which lose their writer when it
    /// was one of them) and it is deleted from the segment. `Ok(false)` if there is none of that name.
    pub fn remove_user_component(&mut self, name: &str) -> Result<bool, UserError> {
        let in_model = self.model.user.iter().any(|u| u.name == name);
        // Not in the model but in the segment: a component that joined while a command that later
        // failed was running (the model went back to before that command). It goes all the same,
        // unless a real-time component took the name since.
        let rt_name = self
            .model
            .loaded
            .iter()
            .any(|l| l.names.iter().any(|n| n == name));
        if in_model {
            self.model.unload_user(name);
        }
        let Some(live) = self.backend.live() else {
            return Ok(in_model);
        };
        if !in_model && rt_name {
            return Ok(false);
        }
        match live.delete_component(name) {
            Ok(()) => Ok(true),
            Err(HalError::NotFound { .. }) => Ok(in_model),
            Err(e) => Err(UserError::new(name, UserWhy::Segment(e.to_string()))),
        }
    }

    /// Adds the user-space components that arrived in the inbox while this session was busy (a
    /// command running, a `loadusr -W` waiting), answering each request.
    pub fn serve_user_inbox(&mut self) {
        let pending: Vec<Pending> =
            std::mem::take(&mut *self.inbox.queue.lock().unwrap_or_else(|p| p.into_inner()));
        for (c, answer) in pending {
            let r = self.add_user_component(&c);
            let _ = answer.send(r);
        }
        let leaving: Vec<Leaving> =
            std::mem::take(&mut *self.inbox.leaving.lock().unwrap_or_else(|p| p.into_inner()));
        for (name, how, answer) in leaving {
            if how == Departure::Disconnected {
                self.program_disconnected(&name);
            }
            let r = self.remove_user_component(&name);
            let _ = answer.send(r);
        }
    }

    /// The inbox of user-space components waiting to join (shared with the control socket).
    pub fn user_inbox(&self) -> Arc<UserInbox> {
        Arc::clone(&self.inbox)
    }
}

type Pending = (UserComponent, mpsc::Sender<Result<(), UserError>>);
type Leaving = (String, Departure, mpsc::Sender<Result<bool, UserError>>);

/// How a user-space component left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Departure {
    /// Its process said `exit()` and may go on running.
    Exit,
    /// Its connection ended: its process is ending (or closed the socket).
    Disconnected,
}

/// User-space components waiting to join while the session is busy: the control socket posts a
/// request and the session's holder adds it between commands or while a `loadusr -W` waits, or
/// the poster itself once it gets the session.
#[derive(Default)]
pub struct UserInbox {
    queue: Mutex<Vec<Pending>>,
    /// Components whose process said `exit()` or whose connection ended, while the session was
    /// busy (a `waitusr` waiting for exactly that).
    leaving: Mutex<Vec<Leaving>>,
}

impl UserInbox {
    /// Posts a component; the answer comes on the returned channel.
    pub fn post(&self, c: UserComponent) -> mpsc::Receiver<Result<(), UserError>> {
        let (tx, rx) = mpsc::channel();
        self.queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((c, tx));
        rx
    }

    /// Posts a component's departure; the answer (whether it was there) comes on the channel.
    pub fn post_leave(
        &self,
        name: &str,
        how: Departure,
    ) -> mpsc::Receiver<Result<bool, UserError>> {
        let (tx, rx) = mpsc::channel();
        self.leaving
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((name.to_string(), how, tx));
        rx
    }

    /// Takes back a component not yet served (true), e.g. when the instance stops meanwhile.
    pub fn withdraw(&self, name: &str) -> bool {
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        let before = q.len();
        q.retain(|(c, _)| c.name != name);
        q.len() != before
    }
}

impl Model {
    /// After a failed command put the model back: the user-space components that joined or left
    /// meanwhile (they are not part of any command) stay as `now` has them.
    pub(super) fn keep_users_from(&mut self, now: &Model) {
        let gone: Vec<String> = self
            .user
            .iter()
            .filter(|u| !now.user.contains(u))
            .map(|u| u.name.clone())
            .collect();
        for name in gone {
            self.unload_user(&name);
        }
        let joined: Vec<&UserComponent> =
            now.user.iter().filter(|u| !self.user.contains(u)).collect();
        for u in joined {
            for p in &u.pins {
                if let Some(info) = now.pins.get(&p.name) {
                    self.pins.insert(p.name.clone(), info.clone());
                }
            }
            for p in &u.params {
                if let Some(info) = now.params.get(&p.name) {
                    self.params.insert(p.name.clone(), info.clone());
                }
            }
            self.user.push(u.clone());
        }
    }

    /// Drops a user-space component's pins and params from the model (with their links).
    pub(super) fn unload_user(&mut self, name: &str) {
        let owned: Vec<String> = self
            .pins
            .iter()
            .filter(|(_, p)| p.owner == name)
            .map(|(n, _)| n.clone())
            .chain(
                self.params
                    .iter()
                    .filter(|(_, p)| p.owner == name)
                    .map(|(n, _)| n.clone()),
            )
            .collect();
        for n in owned {
            self.forget(&n);
        }
        self.user.retain(|u| u.name != name);
    }
}
