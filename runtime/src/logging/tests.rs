use std::io::Write;
use std::sync::{Arc, Mutex};

use super::*;

/// A writer into a shared buffer.
#[derive(Clone, Default)]
struct Buffer(Arc<Mutex<Vec<u8>>>);

impl Write for Buffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Buffer {
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

#[test]
fn a_debug_line_appears_only_after_its_module_is_raised() {
    let buf = Buffer::default();
    let writer = buf.clone();
    let (sub, control) = subscriber(move || writer.clone(), Format::Text, false, "info").unwrap();
    tracing::subscriber::with_default(sub, || {
        tracing::debug!(target: "meshhub::pipeline", "first debug line");
        assert!(!buf.text().contains("first debug line"));
        let modules = BTreeMap::from([("meshhub::pipeline".to_owned(), "debug".to_owned())]);
        let filter = control.set_modules(&modules).unwrap();
        assert_eq!(filter, "info,meshhub::pipeline=debug");
        tracing::debug!(target: "meshhub::pipeline", "second debug line");
        tracing::debug!(target: "meshhub::store", "other module line");
        assert!(buf.text().contains("second debug line"));
        assert!(!buf.text().contains("other module line"));
    });
}

#[test]
fn text_logs_have_no_colour_when_asked_not_to() {
    let buf = Buffer::default();
    let writer = buf.clone();
    let (sub, _) = subscriber(move || writer.clone(), Format::Text, false, "info").unwrap();
    tracing::subscriber::with_default(sub, || tracing::info!(answer = 42, "plain"));
    assert!(buf.text().contains("plain"));
    assert!(!buf.text().contains('\u{1b}'), "{:?}", buf.text());
}

#[test]
fn an_invalid_filter_is_refused_and_the_old_one_kept() {
    let (_, control) = subscriber(std::io::sink, Format::Json, false, "warn").unwrap();
    let err = control.set("meshhub=notalevel").unwrap_err();
    assert!(err.to_string().contains("invalid log filter"), "{err}");
    assert_eq!(control.filter(), "warn");
}

#[test]
fn module_directives_replace_earlier_ones_for_the_same_module() {
    let modules = BTreeMap::from([("a::b".to_owned(), "trace".to_owned())]);
    assert_eq!(
        with_modules("info, a::b=warn ,c=debug", &modules).unwrap(),
        "info,c=debug,a::b=trace"
    );
    let empty = BTreeMap::from([("a".to_owned(), String::new())]);
    assert!(with_modules("info", &empty).is_err());
}
