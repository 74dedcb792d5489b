"""Small programs in the style of autograd's examples, written as a user who switched by
their imports writes them (NumPy, SciPy's logsumexp, s2s.autograd's names), each run end
to end beside the same source run by autograd (`twins.autograd_twin`): logistic
regression by gradient descent, a classifier trained with adam and a callback, an RNN
whose parameters are flattened to one vector and trained by rmsprop."""
import numpy as np
from scipy.special import logsumexp

import s2s
from s2s.autograd import grad, hessian, value_and_grad
from s2s.autograd.misc import flatten
from s2s.autograd.misc.optimizers import adam, rmsprop
from s2s.autograd.test_util import check_grads
from tests.autograd.twins import assert_trees_close, autograd, autograd_twin

# ---------------------------------------------------------------------------------------
# Logistic regression


def sigmoid(x):
    return 0.5 * (np.tanh(x / 2.0) + 1)


def logistic_predictions(weights, inputs):
    return sigmoid(np.dot(inputs, weights))


def training_loss(weights, inputs, targets):
    predictions = logistic_predictions(weights, inputs)
    label_probabilities = predictions * targets + (1 - predictions) * (1 - targets)
    return -np.sum(np.log(label_probabilities))


def fit_logistic_regression(inputs, targets, steps=100, rate=0.01):
    training_gradient = grad(training_loss)
    weights = np.zeros(inputs.shape[1])
    for _ in range(steps):
        weights -= training_gradient(weights, inputs, targets) * rate
    return weights


def logistic_data(seed=0):
    rng = np.random.default_rng(seed)
    inputs = rng.standard_normal((20, 3))
    targets = (inputs @ np.array([1.5, -2.0, 0.5]) + 0.3 * rng.standard_normal(20) > 0).astype(float)
    return inputs, targets


def test_logistic_regression_trains_as_under_autograd():
    inputs, targets = logistic_data()
    weights = fit_logistic_regression(inputs, targets)
    assert_trees_close(weights, autograd_twin(fit_logistic_regression)(inputs, targets), rtol=1e-9)
    assert training_loss(weights, inputs, targets) < 0.5 * training_loss(np.zeros(3), inputs, targets)
    assert_trees_close(hessian(training_loss)(weights, inputs, targets),
                       autograd.hessian(autograd_twin(training_loss))(weights, inputs, targets), rtol=1e-9)
    check_grads(training_loss, modes=["rev"])(weights, inputs, targets)


# ---------------------------------------------------------------------------------------
# A classifier trained with adam on minibatches, its progress reported by a callback


def init_random_params(scale, layer_sizes, seed=0):
    rng = np.random.default_rng(seed)
    return [(scale * rng.standard_normal((m, n)), scale * rng.standard_normal(n))
            for m, n in zip(layer_sizes[:-1], layer_sizes[1:])]


def neural_net_predict(params, inputs):
    for W, b in params:
        outputs = np.dot(inputs, W) + b
        inputs = np.tanh(outputs)
    return outputs - logsumexp(outputs, axis=1, keepdims=True)


def l2_norm(params):
    flattened, _ = flatten(params)
    return np.dot(flattened, flattened)


def log_posterior(params, inputs, targets, l2_reg):
    return -l2_reg * l2_norm(params) + np.sum(neural_net_predict(params, inputs) * targets)


def accuracy(params, inputs, targets):
    return np.mean(np.argmax(neural_net_predict(params, inputs), axis=1) == np.argmax(targets, axis=1))


def classifier_data(seed=1):
    rng = np.random.default_rng(seed)
    inputs = rng.standard_normal((24, 4))
    labels = (inputs[:, 0] * inputs[:, 1] > 0).astype(int) + (inputs[:, 2] > 1).astype(int)
    return inputs, np.eye(3)[labels]


def train_classifier(inputs, targets, num_iters=12, batch_size=8):
    num_batches = len(inputs) // batch_size

    def objective(params, i):
        batch = slice((i % num_batches) * batch_size, (i % num_batches + 1) * batch_size)
        return -log_posterior(params, inputs[batch], targets[batch], 0.01)

    report = []

    def callback(params, i, gradient):
        report.append((i, objective(params, i), accuracy(params, inputs, targets), l2_norm(gradient)))

    params = adam(grad(objective), init_random_params(0.3, [4, 6, 3]), step_size=0.05,
                  num_iters=num_iters, callback=callback)
    return params, report


def test_classifier_trained_with_adam_and_a_callback():
    inputs, targets = classifier_data()
    params, report = train_classifier(inputs, targets)
    their_params, their_report = autograd_twin(train_classifier)(inputs, targets)
    assert_trees_close(params, their_params, rtol=1e-9, atol=1e-12)
    assert_trees_close(report, their_report, rtol=1e-9, atol=1e-12)
    assert report[-1][1] < report[0][1]


# ---------------------------------------------------------------------------------------
# An RNN over one-hot sequences, its parameters one flat vector


def create_rnn_params(input_size, state_size, output_size, seed=0):
    rng = np.random.default_rng(seed)
    return {"init hiddens": 0.1 * rng.standard_normal((1, state_size)),
            "change": 0.1 * rng.standard_normal((input_size + state_size + 1, state_size)),
            "predict": 0.1 * rng.standard_normal((state_size + 1, output_size))}


def concat_and_multiply(weights, *args):
    cat_state = np.hstack(args + (np.ones((args[0].shape[0], 1)),))
    return np.dot(cat_state, weights)


def rnn_predict(params, inputs):
    hiddens = np.repeat(params["init hiddens"], inputs.shape[1], axis=0)
    outputs = []
    for step_input in inputs:
        hiddens = np.tanh(concat_and_multiply(params["change"], step_input, hiddens))
        output = concat_and_multiply(params["predict"], hiddens)
        outputs.append(output - logsumexp(output, axis=1, keepdims=True))
    return outputs


def rnn_log_likelihood(params, inputs, targets):
    logprobs = rnn_predict(params, inputs)
    num_steps, num_examples, _ = inputs.shape
    loglik = 0.0
    for t in range(num_steps - 1):
        loglik += np.sum(logprobs[t] * targets[t + 1])
    return loglik / (num_steps * num_examples)


def one_hot_sequences(seed=2, steps=6, examples=3, alphabet=5):
    rng = np.random.default_rng(seed)
    return np.eye(alphabet)[rng.integers(0, alphabet, (steps, examples))]


def train_rnn(sequences, num_iters=6):
    flat_params, unflatten = flatten(create_rnn_params(5, 4, 5))

    def loss(flat, i):
        return -rnn_log_likelihood(unflatten(flat), sequences, sequences)

    losses = []
    trained = rmsprop(grad(loss), flat_params, step_size=0.05, num_iters=num_iters,
                      callback=lambda flat, i, g: losses.append(loss(flat, i)))
    return unflatten(trained), losses, value_and_grad(loss)(trained, 0)


def test_rnn_on_a_flat_parameter_vector():
    sequences = one_hot_sequences()
    params, losses, (value, gradient) = train_rnn(sequences)
    their_params, their_losses, (their_value, their_gradient) = autograd_twin(train_rnn)(sequences)
    assert_trees_close(params, their_params, rtol=1e-9, atol=1e-12)
    assert_trees_close(losses, their_losses, rtol=1e-9)
    assert_trees_close((value, gradient), (their_value, their_gradient), rtol=1e-9, atol=1e-12)
    assert gradient.shape == flatten(params)[0].shape
    assert losses[-1] < losses[0]


def test_rnn_loss_of_a_flat_vector_under_jit():
    sequences = one_hot_sequences()
    flat_params, unflatten = flatten(create_rnn_params(5, 4, 5))

    def loss(flat):
        return -rnn_log_likelihood(unflatten(flat), sequences, sequences)
    assert_trees_close(s2s.jit(grad(loss))(flat_params), grad(loss)(flat_params), rtol=1e-9, atol=1e-12)


def test_the_twins_run_autograd():
    """The oracle shares nothing with s2s: every name these programs import is autograd's
    in their twins."""
    switched = autograd_twin(train_classifier).__globals__
    assert switched["np"] is autograd.numpy and switched["logsumexp"] is autograd.scipy.special.logsumexp
    assert (switched["grad"], switched["hessian"], switched["value_and_grad"]) == (
        autograd.grad, autograd.hessian, autograd.value_and_grad)
    assert switched["flatten"] is autograd.misc.flatten
    assert (switched["adam"], switched["rmsprop"]) == (autograd.misc.optimizers.adam,
                                                       autograd.misc.optimizers.rmsprop)
    assert switched["check_grads"] is autograd.test_util.check_grads
    assert switched["l2_norm"].__globals__ is switched
