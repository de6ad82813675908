//! `--ask` on the terminal: the proxy's questions about names on no list
//! are put to the person at the terminal of `warden run`, which the
//! supervisor shares with the sandbox's pseudo-terminal. The jail's
//! supervision loop drives the [`Desk`] (as a [`warden_jail::Desk`]); what
//! it asks and how an answer is read is the runtime's.
//!
//! The proxy asks from a thread of its own ([`TerminalAsker`], the proxy's
//! `Asker`); the question waits in a queue, and a byte on a pipe wakes the
//! supervisor's loop, whose [`Desk`] prints the question and reads the
//! answer from what is typed instead of passing it to the sandbox.
//!
//! The sandbox shares the screen, so the desk trusts nothing that could
//! come from it or from the terminal answering it:
//! - while a question is open the supervisor stops relaying the sandbox's
//!   output, so the question stays the last thing on screen and cannot be
//!   erased or restyled;
//! - an answer is a whole word and Enter (`once`, `run`, `always`, `deny`, `never`),
//!   so keys typed ahead for a shell, and the replies a terminal sends to
//!   the sandbox's queries (escape sequences, which are thrown away whole),
//!   do not answer anything; input in the first moments after a question
//!   appears is dropped for the same reason;
//! - Ctrl-C or Ctrl-D denies; `never` denies this and every later question;
//! - questions are bounded: at most [`MAX_WAITING`] wait, the rest are denied
//!   at once, and one nobody answers in [`ASK_TIMEOUT`] is denied.

use nix::errno::Errno;
use std::collections::VecDeque;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use warden_egress::ask::{Answer, Asker, Question};

/// How long a connection waits for an answer before it is denied.
pub const ASK_TIMEOUT: Duration = Duration::from_secs(120);
/// Questions waiting behind the one on screen; more are denied at once.
pub const MAX_WAITING: usize = 16;
/// Input this soon after a question appears was typed (or sent) before the
/// person could read it.
const SETTLE: Duration = Duration::from_millis(400);
/// Leave the alternate screen, soft-reset the terminal (scroll region,
/// character sets, modes, colours), reset the palette's defaults, show the
/// cursor and turn line wrapping on.
const TERMINAL_RESET: &str =
    "\x1b[?1049l\x1b[!p\x1b[r\x1b(B\x1b)B\x0f\x1b]110\x07\x1b]111\x07\x1b]112\x07\x1b[?25h\x1b[?7h\x1b[0m";

/// The longest answer there is.
const MAX_LINE: usize = 16;

struct Pending {
    question: Question,
    reply: mpsc::Sender<Answer>,
    deadline: Instant,
}

/// Where the desk is in an escape sequence, which it drops whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Escape {
    None,
    /// After ESC.
    Start,
    /// `ESC [` ... up to a final byte 0x40..=0x7e.
    Csi,
    /// `ESC O` and one byte (keypad and function keys).
    Ss3,
    /// `ESC ]`, `ESC P`, `ESC _`, `ESC ^` ... up to BEL or `ESC \`.
    Text,
    /// ESC inside a text sequence (perhaps its end).
    TextEsc,
}

/// The proxy's side: sends questions to the supervisor's loop and waits.
pub struct TerminalAsker {
    queue: Mutex<mpsc::Sender<Pending>>,
    wake: OwnedFd,
    /// Questions sent and not yet answered (bounds the proxy's waiting
    /// threads).
    outstanding: AtomicUsize,
}

/// The supervisor's side: the questions, and the one on screen.
pub struct Desk {
    incoming: mpsc::Receiver<Pending>,
    wake: OwnedFd,
    waiting: VecDeque<Pending>,
    current: Option<Pending>,
    /// When the current question appeared.
    shown_at: Instant,
    /// What has been typed for the current question.
    line: String,
    /// Something other than letters was typed (or pasted) into the line:
    /// it answers nothing.
    garbled: bool,
    /// Parameters of the escape sequence being dropped (to see a bracketed
    /// paste begin and end).
    csi: Vec<u8>,
    /// Inside a bracketed paste: everything is dropped.
    pasting: bool,
    /// Inside an escape sequence (a terminal's reply): dropped to its end.
    escape: Escape,
    /// `never` was answered: every later question is denied unasked.
    closed: bool,
}

/// A connected asker and desk.
pub fn pair() -> Result<(TerminalAsker, Desk), Errno> {
    let (rd, wr) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)?;
    let (tx, rx) = mpsc::channel();
    Ok((
        TerminalAsker {
            queue: Mutex::new(tx),
            wake: wr,
            outstanding: AtomicUsize::new(0),
        },
        Desk {
            incoming: rx,
            wake: rd,
            waiting: VecDeque::new(),
            current: None,
            shown_at: Instant::now(),
            line: String::new(),
            garbled: false,
            csi: Vec::new(),
            pasting: false,
            escape: Escape::None,
            closed: false,
        },
    ))
}

impl Asker for TerminalAsker {
    fn ask(&self, question: &Question) -> Answer {
        if self.outstanding.fetch_add(1, Ordering::SeqCst) > MAX_WAITING {
            self.outstanding.fetch_sub(1, Ordering::SeqCst);
            return Answer::Deny;
        }
        let (reply, answer) = mpsc::channel();
        let sent = self.queue.lock().is_ok_and(|q| {
            q.send(Pending {
                question: question.clone(),
                reply,
                deadline: Instant::now() + ASK_TIMEOUT,
            })
            .is_ok()
        });
        let got = if sent {
            // A full pipe already wakes the loop: EAGAIN is fine.
            let _ = nix::unistd::write(&self.wake, b"?");
            answer.recv_timeout(ASK_TIMEOUT).unwrap_or(Answer::Deny)
        } else {
            Answer::Deny
        };
        self.outstanding.fetch_sub(1, Ordering::SeqCst);
        got
    }
}

impl warden_jail::Desk for Desk {
    /// Readable when questions have arrived.
    fn fd(&self) -> BorrowedFd<'_> {
        self.wake.as_fd()
    }

    /// A question is on screen: typed keys are its answer, and the
    /// sandbox's output waits.
    fn is_asking(&self) -> bool {
        self.current.is_some()
    }

    /// Take the questions that arrived; returns what to print.
    fn on_wake(&mut self) -> Option<String> {
        let mut drain = [0u8; 64];
        while matches!(nix::unistd::read(&self.wake, &mut drain), Ok(n) if n > 0) {}
        while let Ok(p) = self.incoming.try_recv() {
            if self.closed || self.waiting.len() >= MAX_WAITING {
                let _ = p.reply.send(Answer::Deny);
            } else {
                self.waiting.push_back(p);
            }
        }
        self.next()
    }

    /// Time passes: a question on screen past its deadline is denied.
    /// Returns what to print.
    fn tick(&mut self) -> Option<String> {
        let now = Instant::now();
        let expired = self.current.as_ref().is_some_and(|c| now >= c.deadline);
        if !expired {
            return None;
        }
        let mut out = String::from("\r\nwarden: no answer in time: denied\r\n");
        self.answer(Answer::Deny);
        if let Some(next) = self.next() {
            out.push_str(&next);
        }
        Some(out)
    }

    /// The person's input ended (a closed terminal, a pipe at its end):
    /// nobody is left to answer, so the question on screen, those waiting
    /// and every later one are denied at once, never left to time out.
    /// Returns what to print.
    fn input_ended(&mut self) -> Option<String> {
        self.closed = true;
        let asked = self.current.is_some();
        self.answer(Answer::Deny);
        for p in self.waiting.drain(..) {
            let _ = p.reply.send(Answer::Deny);
        }
        asked.then(|| {
            "\r\nwarden: the input ended: denied, and every later question will be\r\n".to_string()
        })
    }

    /// Keys typed while a question is on screen. Returns what to print.
    fn on_input(&mut self, keys: &[u8]) -> Option<String> {
        self.current.as_ref()?;
        let mut out = String::new();
        for &k in keys {
            if self.current.is_none() {
                break;
            }
            // Per byte: a question that came up within this read is new.
            let early = self.shown_at.elapsed() < SETTLE;
            self.escape = match (self.escape, k) {
                (Escape::None, 0x1b) => {
                    // Whatever was on the line may be mixed with the
                    // sequence: the answer starts again after it.
                    self.line.clear();
                    self.garbled = false;
                    Escape::Start
                }
                (Escape::None, _) => Escape::None,
                (Escape::Start, b'[') => {
                    self.csi.clear();
                    Escape::Csi
                }
                (Escape::Start, b'O') => Escape::Ss3,
                (Escape::Ss3, _) => {
                    self.escape = Escape::None;
                    continue;
                }
                (Escape::Start, b']' | b'P' | b'_' | b'^') => Escape::Text,
                (Escape::Start, _) => {
                    self.escape = Escape::None;
                    continue;
                }
                (Escape::Csi, 0x40..=0x7e) => {
                    // Bracketed paste: ESC[200~ ... ESC[201~.
                    if k == b'~' {
                        match self.csi.as_slice() {
                            b"200" => self.pasting = true,
                            b"201" => self.pasting = false,
                            _ => {}
                        }
                    }
                    self.escape = Escape::None;
                    continue;
                }
                (Escape::Csi, _) => {
                    if self.csi.len() < 16 {
                        self.csi.push(k);
                    }
                    Escape::Csi
                }
                (Escape::Text, 0x07) => {
                    self.escape = Escape::None;
                    continue;
                }
                (Escape::Text | Escape::TextEsc, 0x1b) => Escape::TextEsc,
                (Escape::TextEsc, b'\\') => {
                    self.escape = Escape::None;
                    continue;
                }
                (Escape::TextEsc, _) => Escape::Text,
                (other, _) => other,
            };
            if self.escape != Escape::None {
                continue;
            }
            if self.pasting {
                self.garbled = true;
                continue;
            }
            match k {
                0x03 | 0x04 => {
                    out.push_str("^C denied\r\n");
                    self.answer(Answer::Deny);
                    if let Some(next) = self.next() {
                        out.push_str(&next);
                    }
                }
                _ if early => {}
                b'\r' | b'\n' => {
                    let word = std::mem::take(&mut self.line).to_ascii_lowercase();
                    let garbled = std::mem::take(&mut self.garbled);
                    let program = self.asks_a_program();
                    let answer = match word.as_str() {
                        _ if garbled => None,
                        // A running sandbox's allowlist cannot widen.
                        "once" | "run" if program.is_some() => None,
                        "always" if program == Some(false) => None,
                        "always" if program.is_some() => Some((
                            Answer::Always,
                            match self.asks_a_program_for_the_profile() {
                                true => "allowed always: added to the profile's process.allow_exec (still refused in this run)",
                                false => "allowed always: on the allowlist of this project's later runs (still refused in this run)",
                            },
                        )),
                        "once" => Some((Answer::Once, "allowed once")),
                        "run" => Some((Answer::ForRun, "allowed for this run")),
                        "always" if self.asks_a_request() => Some((
                            Answer::Always,
                            "allowed for this run: the request rule that allows it is listed when the run ends",
                        )),
                        "always" => Some((
                            Answer::Always,
                            "allowed always: saved for later runs (listed when the run ends)",
                        )),
                        "deny" => Some((Answer::Deny, "denied")),
                        "never" => {
                            self.closed = true;
                            Some((Answer::Deny, "denied, and every later question will be"))
                        }
                        _ => None,
                    };
                    match answer {
                        Some((a, said)) => {
                            out.push_str(&format!("\r\nwarden: {said}\r\n"));
                            self.answer(a);
                            if self.closed {
                                for p in self.waiting.drain(..) {
                                    let _ = p.reply.send(Answer::Deny);
                                }
                            }
                            if let Some(next) = self.next() {
                                out.push_str(&next);
                            }
                        }
                        None => out.push_str(match program {
                            Some(true) => "\r\nwarden: type always, deny or never, then Enter: ",
                            Some(false) => "\r\nwarden: type deny or never, then Enter: ",
                            None => {
                                "\r\nwarden: type once, run, always, deny or never, then Enter: "
                            }
                        }),
                    }
                }
                0x7f | 0x08 if !self.line.is_empty() => {
                    self.line.pop();
                    out.push_str("\x08 \x08");
                }
                k if k.is_ascii_alphabetic() && self.line.len() < MAX_LINE => {
                    self.line.push(k as char);
                    out.push(k as char);
                }
                // Anything else (digits, punctuation, 8-bit controls, an
                // over-long line) spoils the line.
                _ => self.garbled = true,
            }
        }
        (!out.is_empty()).then_some(out)
    }
}

impl Desk {
    /// Answer the question on screen, and the same question waiting behind
    /// it (a client opening several connections at once).
    fn answer(&mut self, answer: Answer) {
        let Some(current) = self.current.take() else {
            return;
        };
        let key = same_as(&current.question);
        let _ = current.reply.send(answer);
        let (same, rest): (VecDeque<_>, VecDeque<_>) = self
            .waiting
            .drain(..)
            .partition(|p| same_as(&p.question) == key);
        self.waiting = rest;
        for p in same {
            let _ = p.reply.send(answer);
        }
    }

    /// The question on screen is about a single request.
    fn asks_a_request(&self) -> bool {
        self.current
            .as_ref()
            .is_some_and(|c| c.question.request.is_some())
    }

    /// The question on screen is about a program the exec allowlist
    /// refused: `Some(true)` when its "always" can be kept.
    fn asks_a_program(&self) -> Option<bool> {
        match self.current.as_ref().map(|c| c.question.protocol) {
            Some(crate::ask_programs::PROGRAM | crate::ask_programs::PROGRAM_INTO_PROFILE) => {
                Some(true)
            }
            Some(crate::ask_programs::PROGRAM_NOT_KEPT) => Some(false),
            _ => None,
        }
    }

    /// The question on screen is about a program whose "always" goes
    /// into the profile in use.
    fn asks_a_program_for_the_profile(&self) -> bool {
        self.current.as_ref().map(|c| c.question.protocol)
            == Some(crate::ask_programs::PROGRAM_INTO_PROFILE)
    }

    fn next(&mut self) -> Option<String> {
        if self.current.is_some() {
            return None;
        }
        let now = Instant::now();
        // Questions whose connection gave up waiting are not asked.
        self.waiting.retain(|p| p.deadline > now);
        let p = self.waiting.pop_front()?;
        let q = &p.question;
        // Whatever the sandbox did to the terminal before (scroll regions,
        // character sets, colours, the alternate screen, a hidden cursor)
        // is undone first, and the name is on the line the answer is
        // typed on.
        let program = match q.protocol {
            crate::ask_programs::PROGRAM => Some(
                "answers: always (on the allowlist of this project's later runs), deny, never (deny all)",
            ),
            crate::ask_programs::PROGRAM_INTO_PROFILE => Some(
                "answers: always (added to the profile's process.allow_exec, for its later runs), deny, never (deny all)",
            ),
            crate::ask_programs::PROGRAM_NOT_KEPT => Some(
                "answers: deny, never (deny all); always is not offered: this run has no place to keep it \
                 (a project's grants, or a profile's own process.allow_exec)",
            ),
            _ => None,
        };
        let prompt = match (&q.request, program) {
            // A program the exec allowlist refused: nothing waits on the
            // answer, the exec stays refused.
            (_, Some(answers)) => format!(
                "{TERMINAL_RESET}\r\n\x1b[7m warden \x1b[0m a program the exec allowlist refused \
                 (the sandbox's output is held until you answer)\r\n\
                 it stays refused in this run: a running sandbox's allowlist cannot widen, \
                 so once and run are not offered\r\n\
                 {answers}\r\n\
                 may run {} ? type an answer, then Enter: ",
                printable(&q.name)
            ),
            // A request of an allowed name, held by an ask rule: what the
            // sandbox chose (its method, path and JSON-RPC calls) is shown
            // printable only.
            (Some(r), None) => format!(
                "{TERMINAL_RESET}\r\n\x1b[7m warden \x1b[0m a request an ask rule holds \
                 (the sandbox's output is held until you answer)\r\n\
                 rule: {}\r\n\
                 answers: once, run (this same request, its JSON-RPC call and query values asked about, \
                 for the rest of the run), always (this run, and its request rule listed when the run ends), \
                 deny, never (deny all)\r\n\
                 allow {} on {}:{} ? type an answer, then Enter: ",
                printable(&r.rule),
                printable(&r.line()),
                printable(&q.name),
                q.port
            ),
            (None, None) => format!(
                "{TERMINAL_RESET}\r\n\x1b[7m warden \x1b[0m a connection no rule allows \
                 (the sandbox's output is held until you answer)\r\n\
                 answers: once, run (this name and port for the rest of the run), \
                 always (and in this project's later runs), deny, never (deny all)\r\n\
                 allow {} {}:{} ? type an answer, then Enter: ",
                q.protocol,
                printable(&q.name),
                q.port
            ),
        };
        self.current = Some(p);
        self.shown_at = now;
        self.line.clear();
        self.garbled = false;
        self.escape = Escape::None;
        Some(prompt)
    }
}

/// What one answer covers: the same name and port, and for a request
/// the same method and target (an answer about one request never lets
/// another through).
fn same_as(q: &Question) -> (String, u16, Option<String>) {
    (q.name.clone(), q.port, q.request.as_ref().map(|r| r.line()))
}

/// `s` as a person may be shown it when the sandbox chose it: every
/// control and format character escaped and `\` written `\\`, as every
/// door shows a name a sandbox chose (one function for all of them).
pub(crate) use warden_workspace::printable_name as printable;

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use warden_jail::Desk as _;

    fn question(name: &str) -> Question {
        Question {
            protocol: "tls",
            name: name.into(),
            port: 443,
            request: None,
        }
    }

    /// A desk with `names` asked from threads, the first on screen and
    /// past its settling time.
    fn asked(names: &[&'static str]) -> (Desk, Vec<std::thread::JoinHandle<Answer>>) {
        let (asker, mut desk) = pair().unwrap();
        let asker = Arc::new(asker);
        let threads: Vec<_> = names
            .iter()
            .map(|n| {
                let asker = asker.clone();
                let n = *n;
                std::thread::spawn(move || asker.ask(&question(n)))
            })
            .collect();
        let start = Instant::now();
        while desk.waiting.len() + usize::from(desk.current.is_some()) < names.len() {
            assert!(start.elapsed() < Duration::from_secs(5));
            desk.on_wake();
            std::thread::sleep(Duration::from_millis(10));
        }
        desk.shown_at = Instant::now() - SETTLE;
        (desk, threads)
    }

    #[test]
    fn only_a_whole_word_and_enter_answer_and_repeats_share_it() {
        let (mut desk, threads) = asked(&["a.test", "a.test", "b.test"]);
        let first = desk.current.as_ref().unwrap().question.name.clone();
        // Letters typed ahead for a shell answer nothing.
        let out = desk.on_input(b"echo yes\r").unwrap();
        assert!(
            out.contains("type once, run, always, deny or never"),
            "{out}"
        );
        assert!(desk.is_asking());
        let out = desk.on_input(b"once\r").unwrap();
        assert!(out.contains("allowed once"), "{out}");
        desk.shown_at = Instant::now() - SETTLE;
        if desk.is_asking() {
            let out = desk.on_input(b"DENY\n").unwrap();
            assert!(out.contains("denied"), "{out}");
        }
        assert!(!desk.is_asking());
        let answers: Vec<Answer> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let allowed = answers.iter().filter(|a| **a == Answer::Once).count();
        assert_eq!(
            allowed,
            if first == "a.test" { 2 } else { 1 },
            "{answers:?}"
        );
    }

    #[test]
    fn a_terminals_reply_and_early_keys_answer_nothing() {
        let (mut desk, threads) = asked(&["a.test"]);
        // What terminals send back for the sandbox's queries (cursor
        // position, colours, a DCS), with letters that would mean "run".
        for reply in [
            &b"\x1b[24;80R"[..],
            b"\x1b]11;rgb:0000/0000/0000\x07",
            b"\x1b]11;run\x1b\\",
            b"\x1bPrun\x1b\\",
        ] {
            assert_eq!(desk.on_input(reply), None, "{reply:?}");
            assert!(desk.line.is_empty(), "{reply:?} left {:?}", desk.line);
            let out = desk.on_input(b"\r").unwrap();
            assert!(out.contains("type once"), "{out}");
        }
        // Keys typed before the question could be read count for nothing.
        desk.shown_at = Instant::now();
        assert_eq!(desk.on_input(b"run\r"), None);
        assert!(desk.is_asking());
        desk.shown_at = Instant::now() - SETTLE;
        let out = desk.on_input(b"deny\r").unwrap();
        assert!(out.contains("denied"), "{out}");
        for t in threads {
            assert_eq!(t.join().unwrap(), Answer::Deny);
        }
    }

    #[test]
    fn pasted_text_and_words_with_other_characters_answer_nothing() {
        let (mut desk, threads) = asked(&["a.test"]);
        for junk in [
            &b"./run\r"[..],
            b"run1\r",
            b"\x9b24;80R\r",
            b"\x1b[200~run\rrun\r\x1b[201~\r",
        ] {
            let out = desk.on_input(junk).unwrap_or_default();
            assert!(desk.is_asking(), "{junk:?} answered: {out}");
        }
        let out = desk.on_input(b"deny\r").unwrap();
        assert!(out.contains("denied"), "{out}");
        for t in threads {
            assert_eq!(t.join().unwrap(), Answer::Deny);
        }
    }

    #[test]
    fn the_next_question_in_the_same_read_is_new_too() {
        let (mut desk, threads) = asked(&["a.test", "b.test"]);
        // One write answers the first and would answer the second at once.
        desk.on_input(b"deny\ronce\r");
        assert!(
            desk.is_asking(),
            "the second question was answered as it appeared"
        );
        desk.shown_at = Instant::now() - SETTLE;
        desk.on_input(b"deny\r");
        for t in threads {
            assert_eq!(t.join().unwrap(), Answer::Deny);
        }
    }

    #[test]
    fn never_denies_everything_after_and_a_flood_is_bounded() {
        let names: Vec<&'static str> = vec!["n.test"; 1];
        let (mut desk, threads) = asked(&names);
        desk.on_input(b"never\r");
        for t in threads {
            assert_eq!(t.join().unwrap(), Answer::Deny);
        }
        let (asker, mut desk2) = pair().unwrap();
        desk2.closed = desk.closed;
        let asker = Arc::new(asker);
        let a = asker.clone();
        let t = std::thread::spawn(move || a.ask(&question("late.test")));
        let start = Instant::now();
        while !t.is_finished() {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "a closed desk still asks"
            );
            desk2.on_wake();
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(t.join().unwrap(), Answer::Deny);
        assert!(!desk2.is_asking());
    }

    #[test]
    fn the_end_of_input_denies_the_question_on_screen_those_waiting_and_later_ones() {
        let (mut desk, threads) = asked(&["a.test", "b.test"]);
        assert!(desk.is_asking());
        let said = desk.input_ended().unwrap();
        assert!(said.contains("input ended"), "{said}");
        assert!(!desk.is_asking());
        for t in threads {
            assert_eq!(t.join().unwrap(), Answer::Deny);
        }
        let (asker, mut desk2) = pair().unwrap();
        desk2.closed = desk.closed;
        let t = std::thread::spawn(move || asker.ask(&question("late.test")));
        let start = Instant::now();
        while !t.is_finished() {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "asked after the end of input"
            );
            desk2.on_wake();
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(t.join().unwrap(), Answer::Deny);
        assert!(!desk2.is_asking());
    }

    #[test]
    fn a_refused_program_is_asked_without_once_or_run_and_its_name_shown_printable() {
        let (asker, mut desk) = pair().unwrap();
        let asker = Arc::new(asker);
        let ask = |protocol: &'static str, name: &str| {
            let (asker, name) = (asker.clone(), name.to_string());
            std::thread::spawn(move || {
                asker.ask(&Question {
                    protocol,
                    name,
                    port: 0,
                    request: None,
                })
            })
        };
        let t = ask(crate::ask_programs::PROGRAM, "/usr/bin/\x1b[2Jid");
        let start = Instant::now();
        let mut shown = None;
        while shown.is_none() {
            assert!(start.elapsed() < Duration::from_secs(5));
            shown = desk.on_wake();
            std::thread::sleep(Duration::from_millis(10));
        }
        let shown = shown.unwrap();
        assert!(shown.contains("may run /usr/bin/\\x1b[2Jid ?"), "{shown}");
        assert!(shown.contains("once and run are not offered"), "{shown}");
        desk.shown_at = Instant::now() - SETTLE;
        for word in [&b"once\r"[..], b"run\r"] {
            let out = desk.on_input(word).unwrap();
            assert!(out.contains("type always, deny or never"), "{out}");
            assert!(desk.is_asking());
        }
        let out = desk.on_input(b"always\r").unwrap();
        assert!(out.contains("later runs"), "{out}");
        assert_eq!(t.join().unwrap(), Answer::Always);
        // Kept in the profile in use: the question and the answer say so.
        let t = ask(crate::ask_programs::PROGRAM_INTO_PROFILE, "/usr/bin/id");
        let start = Instant::now();
        let mut shown = None;
        while shown.is_none() {
            assert!(start.elapsed() < Duration::from_secs(5));
            shown = desk.on_wake();
            std::thread::sleep(Duration::from_millis(10));
        }
        let shown = shown.unwrap();
        assert!(
            shown.contains("added to the profile's process.allow_exec"),
            "{shown}"
        );
        desk.shown_at = Instant::now() - SETTLE;
        let out = desk.on_input(b"always\r").unwrap();
        assert!(out.contains("added to the profile"), "{out}");
        assert_eq!(t.join().unwrap(), Answer::Always);
        // Where nothing keeps a program, "always" answers nothing.
        let t = ask(crate::ask_programs::PROGRAM_NOT_KEPT, "/usr/bin/id");
        let start = Instant::now();
        let mut shown = None;
        while shown.is_none() {
            assert!(start.elapsed() < Duration::from_secs(5));
            shown = desk.on_wake();
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(shown.unwrap().contains("always is not offered"));
        desk.shown_at = Instant::now() - SETTLE;
        let out = desk.on_input(b"always\r").unwrap();
        assert!(out.contains("type deny or never"), "{out}");
        desk.on_input(b"deny\r");
        assert_eq!(t.join().unwrap(), Answer::Deny);
    }

    #[test]
    fn control_and_format_characters_of_a_name_are_shown_escaped_and_nothing_else_is() {
        for (name, shown) in [
            ("/usr/bin/id", "/usr/bin/id"),
            ("/tmp/caf\u{e9}/\u{4e2d}", "/tmp/caf\u{e9}/\u{4e2d}"),
            ("/a\x1b[2Jb", "/a\\x1b[2Jb"),
            ("/a\rb\n", "/a\\x0db\\x0a"),
            ("/a\u{9b}b", "/a\\x9bb"),
            // A right-to-left override makes `/tmp/x/\u{202e}lmth.exe` read
            // as `/tmp/x/exe.html`.
            ("/tmp/x/\u{202e}lmth.exe", "/tmp/x/\\u{202e}lmth.exe"),
            (
                "/a\u{202a}\u{202b}\u{202c}\u{202d}b",
                "/a\\u{202a}\\u{202b}\\u{202c}\\u{202d}b",
            ),
            (
                "/a\u{2066}\u{2067}\u{2068}\u{2069}b",
                "/a\\u{2066}\\u{2067}\\u{2068}\\u{2069}b",
            ),
            (
                "/a\u{200b}\u{200c}\u{200d}\u{200e}\u{200f}b",
                "/a\\u{200b}\\u{200c}\\u{200d}\\u{200e}\\u{200f}b",
            ),
            (
                "/\u{feff}a\u{ad}\u{2028}\u{e0041}",
                "/\\u{feff}a\\xad\\u{2028}\\u{e0041}",
            ),
            // A name cannot spell an escape it does not hold.
            ("/a\\u{202e}b", "/a\\\\u{202e}b"),
        ] {
            assert_eq!(printable(name), shown, "{name:?}");
        }
        // Whatever the name, what is shown holds no character that is not
        // drawn as itself.
        let all: String = (0..0x3000u32)
            .chain(0xfe00..0x10000)
            .chain(0xe0000..0xe0100)
            .filter_map(char::from_u32)
            .collect();
        assert!(printable(&all)
            .chars()
            .all(|c| !c.is_control() && !warden_workspace::is_format(c)));
    }

    #[test]
    fn every_kind_of_question_shows_the_name_escaped() {
        let (asker, mut desk) = pair().unwrap();
        let asker = Arc::new(asker);
        for protocol in ["tcp", crate::ask_programs::PROGRAM] {
            let a = asker.clone();
            let t = std::thread::spawn(move || {
                a.ask(&Question {
                    protocol,
                    name: "x\u{202e}moc.evil".into(),
                    port: 443,
                    request: None,
                })
            });
            let start = Instant::now();
            let mut shown = None;
            while shown.is_none() {
                assert!(start.elapsed() < Duration::from_secs(5));
                shown = desk.on_wake();
                std::thread::sleep(Duration::from_millis(10));
            }
            let shown = shown.unwrap();
            assert!(shown.contains("x\\u{202e}moc.evil"), "{shown}");
            assert!(!shown.contains('\u{202e}'), "{shown}");
            desk.shown_at = Instant::now() - SETTLE;
            desk.on_input(b"deny\r");
            assert_eq!(t.join().unwrap(), Answer::Deny);
        }
    }

    #[test]
    fn a_closed_desk_denies() {
        let (asker, desk) = pair().unwrap();
        drop(desk);
        assert_eq!(asker.ask(&question("a.test")), Answer::Deny);
    }
}
