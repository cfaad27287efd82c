<?php
// Shaped as Magento 2's customer login form (#email, #pass, #send2), which WebArena's login fills.
require __DIR__ . '/../../../db.php';
$error = isset($_GET['failed']) ? '<p class="message-error">Invalid login or password.</p>' : '';
page('Customer Login', $error . '<form id="login-form" method="post" action="/customer/account/loginPost/">'
     . '<label for="email">Email</label> <input id="email" name="login[username]" type="email" title="Email">'
     . ' <label for="pass">Password</label> <input id="pass" name="login[password]" type="password" title="Password">'
     . ' <button type="submit" id="send2" class="action login primary"><span>Sign In</span></button></form>');
