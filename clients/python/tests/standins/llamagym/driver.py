"""Stand-in for LlamaGym's driver: the episode loop of its README and ``examples/blackjack.py``.

LlamaGym has no trainer loop of its own; the user writes it, and upstream's
README (92d7827bc11a53441dcd6bcb4d2ddc6daeb542e0, "Finally, write your RL loop")
and ``examples/blackjack.py`` (``__main__``) show the one every example uses.
:func:`play` makes the same calls in the same order: ``env.reset()`` with no
arguments, then ``agent.act(observation)`` → ``env.step(action)`` →
``agent.assign_reward(reward)`` until ``terminated or truncated``, then the
episode statistics blackjack.py logs (read before terminating) and
``agent.terminate_episode()``, whose result is merged into them.
"""

from typing import Any, Dict, List


def play(agent: Any, env: Any, episodes: int) -> List[Dict[str, Any]]:
    """play runs the upstream loop for episodes episodes and returns blackjack.py's episode_stats per episode."""
    out = []
    for episode in range(episodes):
        observation, info = env.reset()
        done = False

        while not done:
            action = agent.act(observation)
            observation, reward, terminated, truncated, info = env.step(action)
            agent.assign_reward(reward)
            done = terminated or truncated

        episode_stats = {
            "episode": episode,
            "total_return": sum(agent.current_episode_rewards),
            "message_ct": len(agent.current_episode_messages),
            "episode_messages": agent.current_episode_messages,
        }
        train_stats = agent.terminate_episode()
        episode_stats.update(train_stats)
        out.append(episode_stats)
    return out
