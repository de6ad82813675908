//! The shell's quoting, as the rule for secret programs (`super`) reads
//! a script a shell is given: its words after quote removal, with `~`,
//! `~user` and the program's variables expanded, and the operators
//! between them; what cannot be read for certain (a command
//! substitution, a pattern, a variable the program is not given) is why
//! not, never a guess.

use super::stdin::Token;
use super::Env;

/// The words of shell script `script` after quote removal, with `~`,
/// `~user` and the program's variables expanded; why not, when a word
/// cannot be read for certain.
pub(super) fn shell_words(script: &str, env: &Env) -> Result<Vec<String>, &'static str> {
    Ok(shell_tokens(script, env)?
        .into_iter()
        .filter_map(|t| match t {
            Token::Word(w) => Some(w),
            Token::Op(_) => None,
        })
        .collect())
}

/// [`shell_words`] with the operators between them (`;|&<>()` and
/// newlines), for what a line feeds a program on its input.
pub(super) fn shell_tokens(script: &str, env: &Env) -> Result<Vec<Token>, &'static str> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut started = false;
    let mut chars = script.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() || ";|&<>()".contains(c) => {
                if started {
                    words.push(Token::Word(std::mem::take(&mut cur)));
                    started = false;
                }
                if c == '\n' || !c.is_whitespace() {
                    words.push(Token::Op(c));
                }
            }
            '\'' => {
                started = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(x) => cur.push(x),
                        None => return Ok(unclosed(words, cur)),
                    }
                }
            }
            '"' => {
                started = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(x @ ('$' | '`' | '"' | '\\')) => cur.push(x),
                            Some('\n') => {}
                            Some(x) => {
                                cur.push('\\');
                                cur.push(x);
                            }
                            None => return Ok(unclosed(words, cur)),
                        },
                        Some('$') => dollar(&mut chars, env, &mut cur)?,
                        Some('`') => return Err("a command substitution"),
                        Some(x) => cur.push(x),
                        None => return Ok(unclosed(words, cur)),
                    }
                }
            }
            '\\' => {
                started = true;
                match chars.next() {
                    Some('\n') | None => {}
                    Some(x) => cur.push(x),
                }
            }
            '$' => {
                started = true;
                dollar(&mut chars, env, &mut cur)?;
            }
            '`' => return Err("a command substitution"),
            '*' | '?' | '[' => return Err("a pattern"),
            '{' | '}' => return Err("a brace expansion or group"),
            '~' if !started => {
                started = true;
                let mut prefix = String::from("~");
                while let Some(&x) = chars.peek() {
                    if x == '/' || x.is_whitespace() || ";|&<>()'\"\\$`".contains(x) {
                        break;
                    }
                    prefix.push(x);
                    chars.next();
                }
                if prefix == "~+" || prefix == "~-" {
                    return Err("a `~+` or `~-`");
                }
                match env.tilde(&prefix) {
                    Some(home) => cur.push_str(&home),
                    None if prefix == "~" => return Err("a `~` with no HOME given"),
                    None => cur.push_str(&prefix),
                }
            }
            c => {
                started = true;
                cur.push(c);
            }
        }
    }
    if started {
        words.push(Token::Word(cur));
    }
    Ok(words)
}

/// The words of a script that ends inside a quote: the shell refuses it
/// as it parses, but what was read so far is checked all the same.
fn unclosed(mut words: Vec<Token>, cur: String) -> Vec<Token> {
    words.push(Token::Word(cur));
    words
}

/// A `$` of a shell script, outside single quotes: a variable the
/// program is given is its value; anything else (another variable, a
/// positional or special parameter, `$(...)`, `${...}` with an operator,
/// `$'...'`) cannot be read for certain.
fn dollar(
    chars: &mut std::iter::Peekable<std::str::Chars>,
    env: &Env,
    cur: &mut String,
) -> Result<(), &'static str> {
    let braced = chars.peek() == Some(&'{');
    match chars.peek() {
        None => {
            cur.push('$');
            return Ok(());
        }
        Some(c) if c.is_whitespace() || *c == '"' => {
            cur.push('$');
            return Ok(());
        }
        Some('(') => return Err("a command substitution"),
        _ => {}
    }
    if braced {
        chars.next();
    }
    let mut name = String::new();
    while let Some(&x) = chars.peek() {
        if !(x.is_ascii_alphanumeric() || x == '_') {
            break;
        }
        name.push(x);
        chars.next();
    }
    if braced && chars.next() != Some('}') {
        return Err("a parameter expansion with an operator");
    }
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        return Err("a positional or special parameter");
    }
    match env.get(&name) {
        Some(v) => {
            cur.push_str(&v);
            Ok(())
        }
        None => Err("a variable the program is not given"),
    }
}
