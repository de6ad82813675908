//! The reader of the guest's channel held to its bounds: a flooding
//! guest held in the guest, unasked share answers cut off, a retired
//! reader's frames given back whole.

use super::*;
use crate::wire::Kind;
use std::io::Write;

fn feed(tx: SyncSender<Input>) -> Feed {
    Feed {
        tx,
        retired: Arc::new(AtomicBool::new(false)),
    }
}

fn frame_bytes(kind: Kind, payload: usize) -> Vec<u8> {
    let mut b = Vec::new();
    Frame::new(kind, 1, vec![0u8; payload])
        .write_to(&mut b)
        .expect("frame");
    b
}

#[test]
fn a_guest_flooding_output_is_held_in_the_guest_not_in_the_host() {
    let (host, mut guest) = UnixStream::pair().expect("socketpair");
    let (tx, rx) = sync_channel(FRAMES_MAX);
    let (replies_tx, _replies) = sync_channel(REPLIES_MAX);
    let reader = std::thread::spawn(move || {
        read_vm(
            host,
            Vec::new(),
            0,
            feed(tx),
            (replies_tx, CutOff::default()),
        )
    });
    guest
        .set_write_timeout(Some(Duration::from_millis(500)))
        .expect("timeout");
    let frame = frame_bytes(Kind::Stdout, CHUNK);
    // Nobody takes the relay's frames: the guest's writes must block
    // once the host's queue is full, long before 64 MiB.
    let mut sent = 0usize;
    let blocked = loop {
        match guest.write_all(&frame) {
            Ok(()) => sent += frame.len(),
            Err(_) => break true,
        }
        if sent > 64 << 20 {
            break false;
        }
    };
    assert!(blocked, "the host took {sent} bytes without bound");
    // Queue, the reader's buffer and the socket's: a few MiB.
    assert!(sent < 16 << 20, "the host held {sent} bytes");
    let mut got = 0;
    while let Ok(Input::Vm(_)) = rx.recv_timeout(Duration::from_millis(200)) {
        got += 1;
    }
    assert!(got >= FRAMES_MAX, "the queue held {got} frames");
    drop(guest);
    drop(rx);
    let _ = reader.join();
}

#[test]
fn a_guest_flooding_unasked_share_answers_is_cut_off() {
    let (host, mut guest) = UnixStream::pair().expect("socketpair");
    let (tx, rx) = sync_channel(FRAMES_MAX);
    let (replies_tx, _replies) = sync_channel(REPLIES_MAX);
    let cut_off = CutOff::default();
    let reader = {
        let cut_off = cut_off.clone();
        std::thread::spawn(move || read_vm(host, Vec::new(), 7, feed(tx), (replies_tx, cut_off)))
    };
    guest
        .set_write_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let frame = frame_bytes(Kind::Released, 4096);
    for _ in 0..(REPLIES_MAX + 50) {
        if guest.write_all(&frame).is_err() {
            break;
        }
    }
    match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(Input::VmGone(7)) => {}
        _ => panic!("the guest's channel did not end"),
    }
    assert!(reader.join().is_ok());
    // Why, told before the end, for the relay to report: one answer over
    // the bound it holds.
    assert_eq!(
        cut_off.take().map(|(cut, _)| cut),
        Some(warden_audit::VmCut::UnaskedAnswers {
            answers: REPLIES_MAX as u64 + 1,
            bound: REPLIES_MAX as u64,
        })
    );
}

#[test]
fn a_retired_reader_waiting_on_a_full_queue_gives_its_frames_back_whole() {
    let (host, mut guest) = UnixStream::pair().expect("socketpair");
    let (tx, rx) = sync_channel(1);
    let retired = Arc::new(AtomicBool::new(false));
    let feed = Feed {
        tx,
        retired: retired.clone(),
    };
    let (replies_tx, _replies) = sync_channel(REPLIES_MAX);
    let reader = std::thread::spawn(move || {
        read_vm(host, Vec::new(), 0, feed, (replies_tx, CutOff::default()))
    });
    let mut sent = Vec::new();
    for id in 1..=3u64 {
        Frame::new(Kind::Stdout, id, vec![id as u8; 100])
            .write_to(&mut sent)
            .expect("frame");
    }
    guest.write_all(&sent).expect("written");
    std::thread::sleep(Duration::from_millis(300));
    // The relay is saving: it takes nothing and retires the reader.
    retired.store(true, Ordering::SeqCst);
    drop(guest);
    let mut back = reader.join().expect("reader ended");
    let first = match rx.try_recv() {
        Ok(Input::Vm(f)) => f,
        _ => panic!("the first frame was not queued"),
    };
    assert_eq!(first.id, 1);
    let frames = crate::channel::frames(&mut back).expect("whole frames");
    assert_eq!(frames.iter().map(|f| f.id).collect::<Vec<_>>(), vec![2, 3]);
}
