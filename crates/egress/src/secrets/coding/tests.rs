//! The codings undone a step at a time, and a body's bound.

use super::*;

fn pool() -> Arc<Semaphore> {
    Arc::new(Semaphore::new(DECODE_POOL_KIB as usize))
}

fn brotli(data: &[u8], window_bits: u32, large: bool) -> Vec<u8> {
    use std::io::Write;
    let params = brotli::enc::BrotliEncoderParams {
        quality: 1,
        lgwin: window_bits as i32,
        large_window: large,
        ..Default::default()
    };
    let mut o = Vec::new();
    {
        let mut e = brotli::CompressorWriter::with_params(&mut o, 4096, &params);
        e.write_all(data).unwrap();
    }
    o
}

#[test]
fn codings_that_could_need_more_than_the_pool_are_withheld_before_decoding() {
    use Coding::*;
    assert!(too_costly(&[Brotli, Brotli]).is_some());
    assert!(too_costly(&[Brotli, Brotli, Brotli, Brotli]).is_some());
    assert!(too_costly(&[Gzip, Brotli, Deflate, Gzip]).is_none());
    assert!(too_costly(&[Gzip, Gzip, Gzip, Gzip]).is_none());
}

#[test]
fn a_brotli_stage_pays_for_the_window_its_stream_declares_and_gives_it_back() {
    let data = vec![b'a'; 100_000];
    for bits in [16, 17, 18, 22, 24] {
        let coded = brotli(&data, bits, false);
        // The encoder may widen a small window (quality 1 does).
        let window = brotli_window_kib(coded[0]).unwrap();
        assert!(
            (1 << (bits - 10)..=16 * 1024).contains(&window),
            "{bits}: {window}"
        );
        if bits >= 18 {
            assert_eq!(window, 1 << (bits - 10));
        }
        let pool = pool();
        let mut p = Pipeline {
            stages: vec![Stage::new(Coding::Brotli, pool.clone())],
            budget: None,
            counts_coded: false,
        };
        p.feed(&coded);
        p.end_input();
        let Pulled::Data(_) = p.next().unwrap() else {
            panic!("nothing decoded")
        };
        let held = DECODE_POOL_KIB as usize - pool.available_permits();
        assert_eq!(held, (STAGE_KIB + BROTLI_TABLES_KIB + window) as usize);
        while let Pulled::Data(_) = p.next().unwrap() {}
        assert_eq!(pool.available_permits(), DECODE_POOL_KIB as usize);
    }
}

#[test]
fn a_stage_the_pool_cannot_pay_for_waits_and_decodes_nothing() {
    let coded = brotli(&vec![b'a'; 100_000], 24, false);
    let pool = Arc::new(Semaphore::new(8 * 1024));
    let mut p = Pipeline {
        stages: vec![Stage::new(Coding::Brotli, pool.clone())],
        budget: None,
        counts_coded: false,
    };
    p.feed(&coded);
    p.end_input();
    match p.next().unwrap() {
        Pulled::NeedMemory(0, kib) => assert!(kib > 16 * 1024),
        _ => panic!("a stage the pool cannot pay for decoded"),
    }
    assert!(p.stages[0].decoder.is_none());
    assert_eq!(pool.available_permits(), 8 * 1024);
}

#[test]
fn a_large_window_brotli_stream_is_refused() {
    let coded = brotli(&vec![b'a'; 100_000], 30, true);
    let mut p = Pipeline {
        stages: vec![Stage::new(Coding::Brotli, pool())],
        budget: None,
        counts_coded: false,
    };
    p.feed(&coded);
    p.end_input();
    let e = p.next().err().expect("a large-window stream decoded");
    assert!(e.to_string().contains("large-window"), "{e}");
}

#[test]
fn codings_are_undone_last_first_and_unknown_ones_named() {
    let mut h = http::HeaderMap::new();
    h.append("content-encoding", "gzip".parse().unwrap());
    h.append("content-encoding", "br".parse().unwrap());
    h.append("transfer-encoding", "deflate, chunked".parse().unwrap());
    assert_eq!(
        to_undo(&h).unwrap(),
        [Coding::Deflate, Coding::Brotli, Coding::Gzip]
    );
    h.append("content-encoding", "zstd".parse().unwrap());
    assert_eq!(to_undo(&h).unwrap_err(), "zstd");
}

fn code(data: &[u8], applied: &[(Coding, bool)]) -> Vec<u8> {
    use std::io::Write;
    let mut out = data.to_vec();
    for (c, raw) in applied {
        out = match (c, raw) {
            (Coding::Gzip, _) => {
                let mut e = flate2::write::GzEncoder::new(Vec::new(), Default::default());
                e.write_all(&out).unwrap();
                e.finish().unwrap()
            }
            (Coding::Deflate, false) => {
                let mut e = flate2::write::ZlibEncoder::new(Vec::new(), Default::default());
                e.write_all(&out).unwrap();
                e.finish().unwrap()
            }
            (Coding::Deflate, true) => {
                let mut e = flate2::write::DeflateEncoder::new(Vec::new(), Default::default());
                e.write_all(&out).unwrap();
                e.finish().unwrap()
            }
            (Coding::Brotli, _) => {
                let mut o = Vec::new();
                {
                    let mut e = brotli::CompressorWriter::new(&mut o, 4096, 5, 22);
                    e.write_all(&out).unwrap();
                }
                o
            }
        };
    }
    out
}

/// Feed `coded` in pieces of `piece` bytes, taking what each gives.
fn decode_in_pieces(coded: &[u8], undo: &[Coding], piece: usize) -> Vec<u8> {
    let mut p = Pipeline {
        stages: undo.iter().map(|c| Stage::new(*c, pool())).collect(),
        budget: None,
        counts_coded: false,
    };
    let mut out = Vec::new();
    let mut drain = |p: &mut Pipeline| loop {
        match p.next().unwrap() {
            Pulled::Data(d) => {
                assert!(d.len() <= STEP);
                out.extend(d);
            }
            Pulled::NeedInput => return false,
            Pulled::End => return true,
            Pulled::NeedMemory(..) => panic!("the pool cannot pay for one body"),
        }
    };
    // A coding that knows its own end may end before the last bytes of
    // the codings around it (their checksums); what it gave must still
    // be the whole body, which the caller compares.
    for c in coded.chunks(piece) {
        p.feed(c);
        if drain(&mut p) {
            return out;
        }
    }
    p.end_input();
    assert!(drain(&mut p));
    out
}

#[test]
fn every_coding_and_stack_decodes_whole_however_the_body_is_cut() {
    let data: Vec<u8> = (0..300_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 & 0x3f | 0x20)
        .collect();
    let stacks: &[&[(Coding, bool)]] = &[
        &[(Coding::Gzip, false)],
        &[(Coding::Deflate, false)],
        &[(Coding::Deflate, true)],
        &[(Coding::Brotli, false)],
        &[(Coding::Gzip, false), (Coding::Brotli, false)],
        &[
            (Coding::Brotli, false),
            (Coding::Deflate, true),
            (Coding::Gzip, false),
        ],
    ];
    for applied in stacks {
        let coded = code(&data, applied);
        let undo: Vec<Coding> = applied.iter().rev().map(|(c, _)| *c).collect();
        for piece in [1, 7, 4096, coded.len()] {
            let got = decode_in_pieces(&coded, &undo, piece);
            assert!(got == data, "{applied:?} in pieces of {piece}");
        }
    }
}

#[test]
fn a_bomb_is_decoded_a_bounded_step_at_a_time() {
    // 4 GiB of zeros as 4096 gzip members of 1 MiB each, gzipped again:
    // a few kilobytes on the wire.
    let member = code(&vec![0u8; 1 << 20], &[(Coding::Gzip, false)]);
    let inner: Vec<u8> = member.repeat(4096);
    let bomb = code(&inner, &[(Coding::Gzip, false)]);
    assert!(bomb.len() < 64 * 1024, "{}", bomb.len());
    let mut p = Pipeline {
        stages: vec![
            Stage::new(Coding::Gzip, pool()),
            Stage::new(Coding::Gzip, pool()),
        ],
        budget: None,
        counts_coded: false,
    };
    p.feed(&bomb);
    p.end_input();
    let mut taken = 0;
    for _ in 0..64 {
        match p.next().unwrap() {
            Pulled::Data(d) => {
                assert!(d.len() <= STEP);
                assert!(d.iter().all(|b| *b == 0));
                taken += d.len();
            }
            _ => panic!("the bomb ended early"),
        }
        // What waits between the stages is one step at most.
        let between = p.stages[1].input.with(|q| q.bytes.len());
        assert!(between <= STEP, "{between} bytes decoded ahead");
    }
    assert!(taken >= 64 * 1024);
}

#[test]
fn a_bomb_stops_at_its_bound_and_says_so_once() {
    // 4 GiB of zeros in a few kilobytes, undone within a budget.
    let member = code(&vec![0u8; 1 << 20], &[(Coding::Gzip, false)]);
    let bomb = code(&member.repeat(4096), &[(Coding::Gzip, false)]);
    let told = Arc::new(Mutex::new(0));
    let t = told.clone();
    let budget = Arc::new(Budget::new(Some(Box::new(move |_, _| {
        *t.lock().unwrap() += 1;
    }))));
    let mut p = Pipeline::new(
        &[Coding::Gzip, Coding::Gzip],
        &pool(),
        Some(budget.clone()),
        true,
    );
    p.feed(&bomb);
    p.end_input();
    let mut taken = 0u64;
    let e = loop {
        match p.next() {
            Ok(Pulled::Data(d)) => taken += d.len() as u64,
            Ok(_) => panic!("the bomb ended or waited before its bound"),
            Err(e) => break e,
        }
    };
    assert!(e.get_ref().is_some_and(|e| e.is::<Over>()), "{e}");
    let allowed = bound::allowed(bomb.len() as u64);
    assert!(taken <= allowed, "{taken} > {allowed}");
    // Every stage's output counts: the body's own is less than the bound.
    assert!(taken > allowed / 2, "{taken}");
    assert!(budget.is_over());
    assert!(p.next().is_err());
    assert_eq!(*told.lock().unwrap(), 1);
}

#[test]
fn a_middle_coding_of_empty_blocks_costs_what_it_decodes_to() {
    // gzip of gzip of a gzip whose deflate stream is empty stored blocks
    // only: the middle coding unpacks to megabytes, the body itself to
    // nothing. (Under one coding alone the empty blocks could cost no
    // more than one layer may: a bound of the body's own bytes.)
    let mut inner = vec![0x1f, 0x8b, 0x08, 0, 0, 0, 0, 0, 0, 0xff];
    for _ in 0..(48 << 20) / 5 {
        inner.extend_from_slice(&[0x00, 0x00, 0x00, 0xff, 0xff]);
    }
    let coded = code(&inner, &[(Coding::Gzip, false), (Coding::Gzip, false)]);
    let budget = Arc::new(Budget::new(None));
    let mut p = Pipeline::new(
        &[Coding::Gzip, Coding::Gzip, Coding::Gzip],
        &pool(),
        Some(budget.clone()),
        true,
    );
    p.feed(&coded);
    p.end_input();
    assert!(
        bound::allowed(coded.len() as u64) < 48 << 20,
        "{}",
        coded.len()
    );
    match p.next() {
        Err(e) => assert!(budget.is_over(), "{e}"),
        Ok(Pulled::Data(d)) => panic!("empty blocks decoded to {} bytes", d.len()),
        Ok(_) => panic!("48 MiB of empty blocks passed unbounded"),
    }
}

/// Outside review 31, F10: one gzip of a sparse image (a thousandth of
/// its size) was cut at 64 times its bytes. One layer decodes at its own
/// ratio, whatever the size; the same bytes gzip'd once more, which
/// multiplies, are cut where one layer would have to stop.
#[test]
fn one_gzip_decodes_at_its_own_ratio_and_a_stack_is_held_to_what_one_layer_gives() {
    let mut image = vec![0u8; 48 << 20];
    for (i, block) in image.chunks_mut(8 << 20).enumerate() {
        let log = format!("block {i}: a file system's used blocks\n").repeat(100);
        block[..log.len()].copy_from_slice(log.as_bytes());
    }
    let once = code(&image, &[(Coding::Gzip, false)]);
    assert!(
        image.len() as u64 > bound::FLOOR + 64 * once.len() as u64,
        "{}",
        once.len()
    );
    let read = |coded: &[u8], codings: &[Coding]| -> Result<u64, std::io::Error> {
        let budget = Arc::new(Budget::new(None));
        let mut p = Pipeline::new(codings, &pool(), Some(budget), true);
        p.feed(coded);
        p.end_input();
        let mut got = 0u64;
        loop {
            match p.next()? {
                Pulled::Data(d) => got += d.len() as u64,
                Pulled::End => return Ok(got),
                _ => panic!("waited with all its input"),
            }
        }
    };
    assert_eq!(read(&once, &[Coding::Gzip]).unwrap(), image.len() as u64);
    // Stacked, the same image is some 650 bytes: 78,000 times over, cut.
    let twice = code(&once, &[(Coding::Gzip, false)]);
    let e = read(&twice, &[Coding::Gzip, Coding::Gzip]).unwrap_err();
    assert!(e.get_ref().is_some_and(|e| e.is::<Over>()), "{e}");
}
