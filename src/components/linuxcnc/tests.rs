use super::*;

#[test]
fn loadrt_text_resolves_to_native_module_or_nothing() {
    assert_eq!(
        ModuleLoader::new().resolve("pid", true, None),
        Resolved::Native
    );
    assert_eq!(
        ModuleLoader::new().resolve("frobnicator", false, None),
        Resolved::Unknown
    );
    match ModuleLoader::new().resolve("/nonexistent/x.so", false, None) {
        Resolved::Missing { message } => {
            assert!(message.contains("does not exist"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    match ModuleLoader::new().resolve("linuxcnc:frobnicator", false, None) {
        Resolved::Missing { message } => {
            assert!(message.contains("frobnicator.so") && message.contains(MODULE_PATH_ENV))
        }
        other => panic!("{other:?}"),
    }
    // A relative path is taken from the .hal file's directory.
    assert_eq!(
        ModuleLoader::new().resolve(
            "../x.so",
            false,
            Some(Path::new("/rtapi-test-no-such-dir/sub"))
        ),
        Resolved::Missing {
            message: "LinuxCNC module file /rtapi-test-no-such-dir/sub/../x.so does not exist \
                      (a relative path is taken from the directory of the .hal file that says it)"
                .into()
        }
    );
    assert_eq!(
        ModuleLoader::new().resolve("a b", false, None),
        Resolved::Unknown
    );
    assert_eq!(
        ModuleLoader::new().resolve("x.so", false, None),
        Resolved::Unknown
    );
    // `linuxcnc:` takes a name only (rtapi_app refuses `/` and `..` in a name).
    for text in [
        "linuxcnc:../../tmp/x.so",
        "linuxcnc:/usr/lib/linuxcnc/modules/and2.so",
        "linuxcnc:..",
    ] {
        match ModuleLoader::new().resolve(text, false, None) {
            Resolved::Missing { message } => {
                assert!(
                    message.contains("takes a module name") && message.contains("loadrt ./NAME.so"),
                    "{message}"
                )
            }
            other => panic!("{text}: {other:?}"),
        }
    }
}

#[test]
fn search_path_is_config_then_environment_then_debian() {
    let p = ModuleLoader::new().search_path();
    assert_eq!(p.last().unwrap(), Path::new(DEBIAN_MODULE_DIR));
}
