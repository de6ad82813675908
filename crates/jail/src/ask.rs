//! `--ask` on the terminal: the proxy's questions about names on no list
//! are put to the person at the terminal of `warden run`, which the
//! supervisor shares with the sandbox's pseudo-terminal.
//!
//! The proxy asks from a thread of its own ([`TerminalAsker`], the proxy's
//! `Asker`); the question waits in a queue, and a byte on a pipe wakes the
//! supervisor's loop, whose [`Desk`] prints the question and takes the next
//! key typed as the answer instead of passing it to the sandbox. One
//! question is on screen at a time; a question nobody answers in
//! [`ASK_TIMEOUT`] is denied.

use nix::errno::Errno;
use std::collections::VecDeque;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::mpsc;
use std::sync::Mutex;
use std::time::Duration;
use warden_egress::proxy::{Answer, Asker, Question};

/// How long a connection waits for an answer before it is denied.
pub const ASK_TIMEOUT: Duration = Duration::from_secs(120);

struct Pending {
    question: Question,
    reply: mpsc::Sender<Answer>,
}

/// The proxy's side: sends questions to the supervisor's loop and waits.
pub struct TerminalAsker {
    queue: Mutex<mpsc::Sender<Pending>>,
    wake: OwnedFd,
}

/// The supervisor's side: the questions, and the one on screen.
pub struct Desk {
    incoming: mpsc::Receiver<Pending>,
    wake: OwnedFd,
    waiting: VecDeque<Pending>,
    current: Option<Pending>,
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
        },
        Desk {
            incoming: rx,
            wake: rd,
            waiting: VecDeque::new(),
            current: None,
        },
    ))
}

impl Asker for TerminalAsker {
    fn ask(&self, question: &Question) -> Answer {
        let (reply, answer) = mpsc::channel();
        let sent = self.queue.lock().is_ok_and(|q| {
            q.send(Pending {
                question: question.clone(),
                reply,
            })
            .is_ok()
        });
        if !sent {
            return Answer::Deny;
        }
        // A full pipe already wakes the loop: EAGAIN is fine.
        let _ = nix::unistd::write(&self.wake, b"?");
        answer.recv_timeout(ASK_TIMEOUT).unwrap_or(Answer::Deny)
    }
}

impl Desk {
    /// Readable when questions have arrived.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.wake.as_fd()
    }

    /// A question is on screen: typed keys are its answer.
    pub fn is_asking(&self) -> bool {
        self.current.is_some()
    }

    /// Take the questions that arrived; returns what to print when one
    /// comes on screen.
    pub fn on_wake(&mut self) -> Option<String> {
        let mut drain = [0u8; 64];
        while matches!(nix::unistd::read(&self.wake, &mut drain), Ok(n) if n > 0) {}
        while let Ok(p) = self.incoming.try_recv() {
            self.waiting.push_back(p);
        }
        self.next()
    }

    /// Keys typed while a question is on screen. Returns what to print: the
    /// answer taken, and the next question if there is one.
    pub fn on_input(&mut self, keys: &[u8]) -> Option<String> {
        let mut out = String::new();
        for &k in keys {
            let Some(current) = &self.current else {
                break;
            };
            let answer = match k {
                b'o' | b'O' | b'y' | b'Y' => Answer::Once,
                b'r' | b'R' | b'a' | b'A' => Answer::ForRun,
                b'd' | b'D' | b'n' | b'N' | b'\r' | b'\n' | 0x03 | 0x1b => Answer::Deny,
                _ => continue,
            };
            let key = (current.question.name.clone(), current.question.port);
            out.push_str(match answer {
                Answer::Once => "allowed once\r\n",
                Answer::ForRun => "allowed for this run\r\n",
                Answer::Deny => "denied\r\n",
            });
            if let Some(p) = self.current.take() {
                let _ = p.reply.send(answer);
            }
            // The same name and port asked again meanwhile (a client opening
            // several connections at once): the same answer.
            let (same, rest): (VecDeque<_>, VecDeque<_>) = self
                .waiting
                .drain(..)
                .partition(|p| (p.question.name.as_str(), p.question.port) == (&key.0, key.1));
            self.waiting = rest;
            for p in same {
                let _ = p.reply.send(answer);
            }
            if let Some(prompt) = self.next() {
                out.push_str(&prompt);
            }
        }
        (!out.is_empty()).then_some(out)
    }

    fn next(&mut self) -> Option<String> {
        if self.current.is_some() {
            return None;
        }
        let p = self.waiting.pop_front()?;
        let q = &p.question;
        let prompt = format!(
            "\r\nwarden: the sandbox opens {} {}:{}, which no rule allows. Allow [o]nce, for this [r]un, or [d]eny? ",
            q.protocol, q.name, q.port
        );
        self.current = Some(p);
        Some(prompt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn question(name: &str) -> Question {
        Question {
            protocol: "tls",
            name: name.into(),
            port: 443,
        }
    }

    #[test]
    fn a_typed_key_answers_the_question_on_screen_and_repeats_share_it() {
        let (asker, mut desk) = pair().unwrap();
        let asker = Arc::new(asker);
        let threads: Vec<_> = ["a.test", "a.test", "b.test"]
            .into_iter()
            .map(|n| {
                let asker = asker.clone();
                std::thread::spawn(move || asker.ask(&question(n)))
            })
            .collect();
        // Wait until all three are queued.
        let mut prompt = None;
        let start = std::time::Instant::now();
        while desk.waiting.len() + usize::from(desk.current.is_some()) < 3 {
            assert!(start.elapsed() < Duration::from_secs(5));
            if let Some(p) = desk.on_wake() {
                prompt = Some(p);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let prompt = prompt.unwrap();
        let first = desk.current.as_ref().unwrap().question.name.clone();
        assert!(prompt.contains(&format!("tls {first}:443")), "{prompt}");
        assert!(desk.is_asking());
        // Keys that mean nothing are ignored; 'o' answers.
        let out = desk.on_input(b"xo").unwrap();
        assert!(out.starts_with("allowed once"), "{out}");
        // Whatever came next is on screen now; deny it.
        let out = desk.on_input(b"d").unwrap();
        assert!(out.starts_with("denied"), "{out}");
        if desk.is_asking() {
            desk.on_input(b"d");
        }
        assert!(!desk.is_asking());
        let answers: Vec<Answer> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let allowed = answers.iter().filter(|a| **a == Answer::Once).count();
        assert!(allowed == 1 || allowed == 2, "{answers:?}");
    }

    #[test]
    fn a_closed_desk_denies() {
        let (asker, desk) = pair().unwrap();
        drop(desk);
        assert_eq!(asker.ask(&question("a.test")), Answer::Deny);
    }
}
