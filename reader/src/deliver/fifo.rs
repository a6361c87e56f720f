//! Per-group order for FIFO queues.
//!
//! Why a message that is not finished stops its group: SQS hands out a group's next messages only
//! after the earlier ones are gone, so order is ours to keep within one receive batch. If a
//! group's message is released (the sink failed), delivering the messages after it would put them
//! ahead of its redelivery; they are released with it and come back in order.

use std::collections::HashMap;

/// Indexes of a batch split by message group, each group in receive order, groups in order of
/// first appearance. A message without a group id is a group of its own.
pub fn group_runs<'a>(group_ids: impl IntoIterator<Item = Option<&'a str>>) -> Vec<Vec<usize>> {
    let mut runs: Vec<Vec<usize>> = Vec::new();
    let mut by_group: HashMap<&str, usize> = HashMap::new();
    for (i, group) in group_ids.into_iter().enumerate() {
        match group {
            Some(g) => match by_group.get(g) {
                Some(&run) => runs[run].push(i),
                None => {
                    by_group.insert(g, runs.len());
                    runs.push(vec![i]);
                }
            },
            None => runs.push(vec![i]),
        }
    }
    runs
}

/// Run `step` over `run` in order while `finished` says its answer settles the message; returns
/// the answers, and the indexes after the first unfinished one (not stepped, to be released).
pub async fn in_order<T, F, Fut>(
    run: &[usize],
    mut step: F,
    finished: impl Fn(&T) -> bool,
) -> (Vec<(usize, T)>, Vec<usize>)
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = T>,
{
    let mut answers = Vec::with_capacity(run.len());
    for (k, &i) in run.iter().enumerate() {
        let answer = step(i).await;
        let done = finished(&answer);
        answers.push((i, answer));
        if !done {
            return (answers, run[k + 1..].to_vec());
        }
    }
    (answers, Vec::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_keep_receive_order() {
        let ids = [Some("a"), Some("b"), Some("a"), None, Some("b"), Some("a"), None];
        assert_eq!(group_runs(ids), vec![vec![0, 2, 5], vec![1, 4], vec![3], vec![6]]);
        assert!(group_runs(std::iter::empty()).is_empty());
    }

    #[tokio::test]
    async fn an_unfinished_message_holds_back_the_rest_of_its_group() {
        let (answers, rest) = in_order(&[4, 7, 9, 11], |i| async move { i != 7 }, |ok| *ok).await;
        assert_eq!(answers, vec![(4, true), (7, false)]);
        assert_eq!(rest, vec![9, 11]);
        let (answers, rest) = in_order(&[1, 2], |_| async { true }, |ok| *ok).await;
        assert_eq!((answers.len(), rest.len()), (2, 0));
    }
}
