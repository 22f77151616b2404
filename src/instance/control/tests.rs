//! The server and the client together, over a real socket.

use std::io::{BufRead, BufReader, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::protocol::{Request, WireObject};
use super::*;
use rtapi_hal::{ParamAccess, PinDir, ValueType};

/// Records what it was asked; `fail` fails, `quit` quits, anything else echoes.
struct Echo {
    seen: Vec<String>,
}

/// Hosts user-space components in a list.
struct Users {
    present: Vec<String>,
}

impl Executor for Users {
    fn execute(&mut self, _: &str, _: &mut dyn Write) -> Result<Flow, ExecError> {
        Ok(Flow::Continue)
    }
    fn source(
        &mut self,
        _: &Path,
        _: Option<&Path>,
        _: bool,
        _: &mut dyn Write,
    ) -> Result<Flow, ExecError> {
        Ok(Flow::Continue)
    }
    fn add_user_component(&mut self, c: &UserComponent) -> Result<(), ExecError> {
        if self.present.contains(&c.name) {
            return Err(ExecError::UserComponent(UserError::new(
                &c.name,
                UserWhy::Taken,
            )));
        }
        self.present.push(c.name.clone());
        Ok(())
    }
    fn remove_user_component(&mut self, name: &str) -> Result<bool, ExecError> {
        let had = self.present.iter().any(|n| n == name);
        self.present.retain(|n| n != name);
        Ok(had)
    }
}

#[test]
fn a_user_component_lives_as_long_as_its_connection() {
    let name = unique("users");
    let exec = Arc::new(Mutex::new(Users {
        present: Vec::new(),
    }));
    let _server = ControlServer::start(&name, exec.clone()).unwrap();
    let me = std::process::id();
    let decl = |n: &str| UserComponent {
        name: n.into(),
        pins: vec![UserPin {
            name: format!("{n}.out"),
            ty: ValueType::Float,
            dir: PinDir::Out,
        }],
        params: vec![UserParam {
            name: format!("{n}.gain"),
            ty: ValueType::S32,
            access: ParamAccess::Ro,
        }],
        pid: None,
    };
    let mut a = ControlClient::connect(&name, me).unwrap();
    let mut b = ControlClient::connect(&name, me).unwrap();
    assert!(a.user_component(&decl("one")).unwrap().ok);
    assert!(a.user_component(&decl("two")).unwrap().ok);
    assert!(!b.user_component(&decl("one")).unwrap().ok, "taken");
    // b cannot remove a's component; a can.
    assert!(!b.user_exit("one").unwrap().ok);
    assert!(a.user_exit("one").unwrap().ok);
    assert_eq!(exec.lock().unwrap().present, ["two"]);
    // A bad declaration is refused before it reaches the executor.
    let mut bad = decl("three");
    bad.pins[0].name = "three.x".into();
    let r = b
        .request(&Request::UserComponent {
            user_component: "three".into(),
            pins: vec![WireObject {
                name: "three.x".into(),
                ty: "complex".into(),
                dir: Some("out".into()),
                access: None,
            }],
            params: vec![],
        })
        .unwrap();
    assert!(r.error.unwrap().contains("'complex' is not one of"));
    // The connection closes: what it declared goes.
    drop(a);
    let until = std::time::Instant::now() + Duration::from_secs(5);
    while !exec.lock().unwrap().present.is_empty() {
        assert!(std::time::Instant::now() < until, "two was not removed");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(b.user_component(&bad).unwrap().ok);
}

impl Executor for Echo {
    fn execute(&mut self, line: &str, out: &mut dyn Write) -> Result<Flow, ExecError> {
        self.seen.push(line.to_string());
        match line {
            "fail" => Err(ExecError::Unsupported("it failed".into())),
            "quit" => Ok(Flow::Quit),
            _ => {
                writeln!(out, "did {line}").unwrap();
                Ok(Flow::Continue)
            }
        }
    }
    fn source(
        &mut self,
        file: &Path,
        ini: Option<&Path>,
        keep_going: bool,
        out: &mut dyn Write,
    ) -> Result<Flow, ExecError> {
        write!(out, "{} {:?} {keep_going}", file.display(), ini).unwrap();
        Ok(Flow::Continue)
    }
}

fn unique(tag: &str) -> String {
    format!("ctl-{tag}-{}", std::process::id())
}

#[test]
fn commands_go_through_one_executor_and_answers_come_back() {
    let name = unique("echo");
    let exec = Arc::new(Mutex::new(Echo { seen: Vec::new() }));
    let server = ControlServer::start(&name, exec.clone()).unwrap();
    let me = std::process::id();
    let mut a = ControlClient::connect(&name, me).unwrap();
    let mut b = ControlClient::connect(&name, me).unwrap();
    let r = a.execute("show pin").unwrap();
    assert!(r.ok && r.out == "did show pin\n" && !r.quit, "{r:?}");
    let r = b.execute("fail").unwrap();
    assert!(!r.ok && r.error.as_deref() == Some("it failed"), "{r:?}");
    let r = b
        .source(Path::new("/x/y.hal"), Some(Path::new("/x/m.ini")), true)
        .unwrap();
    assert_eq!(r.out, "/x/y.hal Some(\"/x/m.ini\") true");
    let r = a.execute("quit").unwrap();
    assert!(r.ok && r.quit);
    // The server hung up on a, b still works.
    assert!(a.execute("show").is_err());
    assert!(b.execute("list pin").unwrap().ok);
    assert_eq!(
        exec.lock().unwrap().seen,
        ["show pin", "fail", "quit", "list pin"]
    );
    drop(server);
    assert!(matches!(
        ControlClient::connect(&name, me),
        Err(ClientError::NotListening(_))
    ));
}

#[test]
fn a_socket_not_held_by_the_owner_is_refused() {
    let name = unique("impostor");
    let exec = Arc::new(Mutex::new(Echo { seen: Vec::new() }));
    let _server = ControlServer::start(&name, exec.clone()).unwrap();
    // The segment says the owner is pid 1: we (the server) are an impostor.
    match ControlClient::connect(&name, 1) {
        Err(ClientError::Impostor { pid, owner: 1 }) => {
            assert_eq!(pid as u32, std::process::id())
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
    assert!(exec.lock().unwrap().seen.is_empty());
    // A second owner of the same name cannot listen.
    assert!(ControlServer::start(&name, exec).is_err());
}

#[test]
fn garbage_gets_an_error_not_a_hang() {
    let name = unique("garbage");
    let exec = Arc::new(Mutex::new(Echo { seen: Vec::new() }));
    let _server = ControlServer::start(&name, exec).unwrap();
    let addr = SocketAddr::from_abstract_name(socket_name(&name).as_bytes()).unwrap();
    let mut s = UnixStream::connect_addr(&addr).unwrap();
    writeln!(s, "show pin").unwrap();
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    let r: Reply = serde_json::from_str(&line).unwrap();
    assert!(!r.ok && r.error.unwrap().contains("bad request"));
}
